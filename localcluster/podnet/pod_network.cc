// libcohort-pod-network.so: loaded with LD_PRELOAD into every process the local kubelet starts,
// it gives the process what a pod's network namespace would:
// - bind() to the wildcard address (0.0.0.0 or ::) binds the pod's own address
//   ($COHORT_LOCAL_POD_IP, 127.0.x.y) instead, so pods on one machine can use the same ports;
// - getaddrinfo() answers the cluster's DNS names ("<host>.<subdomain>.<ns>.svc") from the
//   hosts file the kubelet keeps ($COHORT_LOCAL_HOSTS_FILE), and fails fast for other
//   in-cluster names instead of asking the machine's resolver;
// - gethostname() answers the pod's hostname ($HOSTNAME, which the kubelet sets), as a pod's
//   UTS namespace would, and getaddrinfo() of that name its address, as its /etc/hosts would;
// - and what its mount namespace would for read-only mounts the kubelet lists in
//   $COHORT_LOCAL_MOUNTS ("<mountPath>=<directory>;...": the service account at
//   /var/run/secrets/kubernetes.io/serviceaccount): open(), openat(), fopen(), stat(), lstat(),
//   fstatat() and access() of a path under one reach the pod's copy instead.
// Everything else goes to the C library unchanged.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "localcluster/podnet/pod_network_env.h"

namespace {

using BindFn = int (*)(int, const sockaddr*, socklen_t);
using GetaddrinfoFn = int (*)(const char*, const char*, const addrinfo*, addrinfo**);

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The address of `name` in the hosts file, or "".
std::string LookUp(const std::string& name) {
  const char* path = std::getenv(cohort::local::kHostsFileVariable);
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

// $COHORT_LOCAL_MOUNTS, read once: (mount path, directory), longest mount path first.
const std::vector<std::pair<std::string, std::string>>& Mounts() {
  static const auto* mounts = [] {
    auto* out = new std::vector<std::pair<std::string, std::string>>();
    const char* table = std::getenv(cohort::local::kMountsVariable);
    std::string entries = table != nullptr ? table : "";
    size_t start = 0;
    while (start < entries.size()) {
      size_t end = entries.find(';', start);
      if (end == std::string::npos) end = entries.size();
      std::string entry = entries.substr(start, end - start);
      size_t eq = entry.find('=');
      if (eq != std::string::npos && eq > 0)
        out->emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
      start = end + 1;
    }
    std::sort(out->begin(), out->end(),
              [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    return out;
  }();
  return *mounts;
}

// `path` moved under its mount's directory when it lies under a mount path; else "".
std::string Redirect(const char* path) {
  if (path == nullptr || path[0] != '/') return "";
  const size_t length = std::strlen(path);
  for (const auto& [mount, dir] : Mounts()) {
    if (length < mount.size() || std::strncmp(path, mount.c_str(), mount.size()) != 0) continue;
    if (length == mount.size() || path[mount.size()] == '/') return dir + (path + mount.size());
  }
  return "";
}

template <typename Fn>
Fn Next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

mode_t ModeArgument(int flags, va_list args) {
  return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE
             ? static_cast<mode_t>(va_arg(args, int))
             : 0;
}

}  // namespace

extern "C" FILE* fopen(const char* path, const char* mode) {
  static auto real = Next<FILE* (*)(const char*, const char*)>("fopen");
  const std::string moved = Redirect(path);
  return real(moved.empty() ? path : moved.c_str(), mode);
}

extern "C" int open(const char* path, int flags, ...) {
  static auto real = Next<int (*)(const char*, int, ...)>("open");
  va_list args;
  va_start(args, flags);
  const mode_t mode = ModeArgument(flags, args);
  va_end(args);
  const std::string moved = Redirect(path);
  return real(moved.empty() ? path : moved.c_str(), flags, mode);
}

extern "C" int openat(int dir_fd, const char* path, int flags, ...) {
  static auto real = Next<int (*)(int, const char*, int, ...)>("openat");
  va_list args;
  va_start(args, flags);
  const mode_t mode = ModeArgument(flags, args);
  va_end(args);
  const std::string moved = Redirect(path);
  return real(dir_fd, moved.empty() ? path : moved.c_str(), flags, mode);
}

extern "C" int stat(const char* path, struct stat* out) {
  static auto real = Next<int (*)(const char*, struct stat*)>("stat");
  const std::string moved = Redirect(path);
  return real(moved.empty() ? path : moved.c_str(), out);
}

extern "C" int lstat(const char* path, struct stat* out) {
  static auto real = Next<int (*)(const char*, struct stat*)>("lstat");
  const std::string moved = Redirect(path);
  return real(moved.empty() ? path : moved.c_str(), out);
}

extern "C" int fstatat(int dir_fd, const char* path, struct stat* out, int flags) {
  static auto real = Next<int (*)(int, const char*, struct stat*, int)>("fstatat");
  const std::string moved = Redirect(path);
  return real(dir_fd, moved.empty() ? path : moved.c_str(), out, flags);
}

extern "C" int access(const char* path, int mode) {
  static auto real = Next<int (*)(const char*, int)>("access");
  const std::string moved = Redirect(path);
  return real(moved.empty() ? path : moved.c_str(), mode);
}

// The 64-bit names are the same calls on 64-bit Linux (glibc makes them aliases too).

extern "C" FILE* fopen64(const char* path, const char* mode) __attribute__((alias("fopen")));
extern "C" int open64(const char* path, int flags, ...) __attribute__((alias("open")));
extern "C" int openat64(int dir_fd, const char* path, int flags, ...)
    __attribute__((alias("openat")));

extern "C" int gethostname(char* name, size_t length) {
  static auto real = Next<int (*)(char*, size_t)>("gethostname");
  const char* pod =
      std::getenv(cohort::local::kPodIpVariable) != nullptr ? std::getenv("HOSTNAME") : nullptr;
  if (pod == nullptr || *pod == '\0') return real(name, length);
  const size_t n = std::strlen(pod);
  if (n + 1 > length) {
    errno = ENAMETOOLONG;
    return -1;
  }
  std::memcpy(name, pod, n + 1);
  return 0;
}

extern "C" int bind(int fd, const sockaddr* addr, socklen_t len) {
  static BindFn real = reinterpret_cast<BindFn>(dlsym(RTLD_NEXT, "bind"));
  const char* pod_ip = std::getenv(cohort::local::kPodIpVariable);
  in_addr pod{};
  if (pod_ip == nullptr || addr == nullptr || inet_pton(AF_INET, pod_ip, &pod) != 1)
    return real(fd, addr, len);
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

extern "C" int getaddrinfo(const char* node, const char* service, const addrinfo* hints,
                           addrinfo** res) {
  static GetaddrinfoFn real = reinterpret_cast<GetaddrinfoFn>(dlsym(RTLD_NEXT, "getaddrinfo"));
  if (node != nullptr) {
    std::string name(node);
    while (!name.empty() && name.back() == '.') name.pop_back();
    // The pod's own hostname is its address, as a pod's /etc/hosts says.
    const char* own_ip = std::getenv(cohort::local::kPodIpVariable);
    const char* own_name = std::getenv("HOSTNAME");
    std::string address = own_ip != nullptr && own_name != nullptr && name == own_name
                              ? std::string(own_ip)
                              : LookUp(name);
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
