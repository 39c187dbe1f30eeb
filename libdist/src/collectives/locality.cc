#include "libdist/src/collectives/locality.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/env.h"

namespace dist::internal {

std::string LocalityKey() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  struct stat st {};
  const uint64_t netns = stat("/proc/self/ns/net", &st) == 0 ? st.st_ino : 0;
  if (boot_id.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    boot_id = host;
  }
  return absl::StrCat(boot_id, ".", netns);
}

std::string TcpHost(const std::string& configured, const std::string& coordinator_address) {
  if (!configured.empty()) return configured;
  if (auto pod_ip = cohort::env::Get(cohort::env::kPodIp)) return *pod_ip;
  const size_t colon = coordinator_address.rfind(':');
  std::string host =
      colon == std::string::npos ? coordinator_address : coordinator_address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "localhost" || absl::StartsWith(host, "127.") || host == "::1") {
    return "127.0.0.1";
  }
  // The source address of the route to the coordinator (no packet is sent).
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "127.0.0.1";
  std::string result = "127.0.0.1";
  int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char buf[INET6_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      if (local.ss_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, buf, sizeof(buf));
      } else {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, buf, sizeof(buf));
      }
      result = buf;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return result;
}

}  // namespace dist::internal
