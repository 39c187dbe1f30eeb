// libcohort-pod-network.so: loaded with LD_PRELOAD into every process the local kubelet starts,
// it gives the process what a pod's network namespace would:
// - bind() to the wildcard address (0.0.0.0 or ::) binds the pod's own address
//   ($COHORT_LOCAL_POD_IP, 127.0.x.y) instead, so pods on one machine can use the same ports;
// - getaddrinfo() answers the cluster's DNS names ("<host>.<subdomain>.<ns>.svc") from the
//   hosts file the kubelet keeps ($COHORT_LOCAL_HOSTS_FILE), and fails fast for other
//   in-cluster names instead of asking the machine's resolver.
// Everything else goes to the C library unchanged.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace {

using BindFn = int (*)(int, const sockaddr*, socklen_t);
using GetaddrinfoFn = int (*)(const char*, const char*, const addrinfo*, addrinfo**);

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The address of `name` in the hosts file, or "".
std::string LookUp(const std::string& name) {
  const char* path = std::getenv("COHORT_LOCAL_HOSTS_FILE");
  if (path == nullptr) return "";
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string address, alias;
    fields >> address;
    while (fields >> alias) {
      if (alias == name) return address;
    }
  }
  return "";
}

}  // namespace

extern "C" int bind(int fd, const sockaddr* addr, socklen_t len) {
  static BindFn real = reinterpret_cast<BindFn>(dlsym(RTLD_NEXT, "bind"));
  const char* pod_ip = std::getenv("COHORT_LOCAL_POD_IP");
  in_addr pod{};
  if (pod_ip == nullptr || addr == nullptr || inet_pton(AF_INET, pod_ip, &pod) != 1) return real(fd, addr, len);
  if (addr->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    sockaddr_in v4;
    std::memcpy(&v4, addr, sizeof(v4));
    if (v4.sin_addr.s_addr == htonl(INADDR_ANY)) {
      v4.sin_addr = pod;
      return real(fd, reinterpret_cast<sockaddr*>(&v4), sizeof(v4));
    }
  } else if (addr->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    sockaddr_in6 v6;
    std::memcpy(&v6, addr, sizeof(v6));
    if (IN6_IS_ADDR_UNSPECIFIED(&v6.sin6_addr)) {
      // ::ffff:127.0.x.y on the dual-stack socket.
      std::memset(&v6.sin6_addr, 0, sizeof(v6.sin6_addr));
      v6.sin6_addr.s6_addr[10] = 0xff;
      v6.sin6_addr.s6_addr[11] = 0xff;
      std::memcpy(&v6.sin6_addr.s6_addr[12], &pod, 4);
      return real(fd, reinterpret_cast<sockaddr*>(&v6), sizeof(v6));
    }
  }
  return real(fd, addr, len);
}

extern "C" int getaddrinfo(const char* node, const char* service, const addrinfo* hints, addrinfo** res) {
  static GetaddrinfoFn real = reinterpret_cast<GetaddrinfoFn>(dlsym(RTLD_NEXT, "getaddrinfo"));
  if (node != nullptr) {
    std::string name(node);
    while (!name.empty() && name.back() == '.') name.pop_back();
    std::string address = LookUp(name);
    if (!address.empty()) {
      addrinfo numeric{};
      if (hints != nullptr) numeric = *hints;
      numeric.ai_flags |= AI_NUMERICHOST;
      numeric.ai_flags &= ~AI_ADDRCONFIG;  // Loopback-only machines still get an answer.
      if (numeric.ai_family == AF_INET6) numeric.ai_family = AF_UNSPEC;
      return real(address.c_str(), service, &numeric, res);
    }
    if (EndsWith(name, ".svc") || EndsWith(name, ".svc.cluster.local")) return EAI_NONAME;
  }
  return real(node, service, hints, res);
}
