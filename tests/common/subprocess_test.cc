// common/process/subprocess.h: the free port a launcher hands to a program that binds it later.

#include "common/process/subprocess.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "gtest/gtest.h"

namespace cohort {
namespace {

// Binds `port` on 127.0.0.1 and releases it: whether that worked.
bool Binds(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (fd >= 0) close(fd);
  return ok;
}

// A port from the kernel's ephemeral range can be taken as the local port of any outgoing
// connection between the pick and the caller's bind (PyTorch's TCPStore failed on MASTER_PORT
// with EADDRINUSE so under a loaded test run): the port comes from below that range.
TEST(PickFreePort, BelowTheEphemeralRange_AndFree) {
  int ephemeral_low = 0, ephemeral_high = 0;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low >> ephemeral_high;
  if (ephemeral_low - 10000 < 1000)
    GTEST_SKIP() << "the ephemeral range starts at " << ephemeral_low;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<int> port = PickFreePort();
    ASSERT_TRUE(port.ok()) << port.status();
    EXPECT_GE(*port, 10000);
    EXPECT_LT(*port, ephemeral_low);
    EXPECT_TRUE(Binds(*port)) << *port;
  }
}

}  // namespace
}  // namespace cohort
