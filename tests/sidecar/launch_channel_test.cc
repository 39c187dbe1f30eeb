// The sidecar's end of the launch socket, with cohort-launch played by the test over a real Unix
// socket: the orders it hears (on connect and after), and the ends it reports.

#include "sidecar/launch_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/process/launch_protocol.h"
#include "gtest/gtest.h"
#include "tests/common/temporary_directory.h"

namespace cohort::sidecar {
namespace {

constexpr absl::Duration kWait = absl::Seconds(10);

// cohort-launch's side: a connection to the socket, read line by line.
class Launcher {
 public:
  explicit Launcher(const std::string& path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Launcher() { close(fd_); }
  bool connected() const { return connected_; }
  // The next line the sidecar sends, within kWait.
  std::optional<std::string> Next() {
    const absl::Time deadline = absl::Now() + kWait;
    while (buffer_.find('\n') == std::string::npos) {
      pollfd p{fd_, POLLIN, 0};
      const int left = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
      if (left <= 0 || poll(&p, 1, left) != 1) return std::nullopt;
      char chunk[256];
      const ssize_t n = read(fd_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
    const size_t end = buffer_.find('\n');
    std::string line = buffer_.substr(0, end + 1);
    buffer_.erase(0, end + 1);
    return line;
  }
  bool Send(const std::string& line) {
    return write(fd_, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

class LaunchChannelTest : public ::testing::Test {
 protected:
  testing::TemporaryDirectory tmp_{"launch-channel-test"};
  const std::string dir_ = tmp_.path();
};

// A spare that took a slot: the order carries its pod index, and every later order (also the one
// a reconnecting cohort-launch hears first) repeats it.
TEST_F(LaunchChannelTest, OrdersOnConnectAndAfter_APodIndexOnceGivenIsRepeated) {
  const std::string path = dir_ + "/launch.sock";
  absl::Notification ended;
  launch::AttemptEnded got;
  absl::StatusOr<std::unique_ptr<LaunchChannel>> channel =
      LaunchChannel::Serve(path, /*attempt=*/std::nullopt, [&](const launch::AttemptEnded& e) {
        got = e;
        ended.Notify();
      });
  ASSERT_TRUE(channel.ok()) << channel.status();

  auto first = std::make_unique<Launcher>(path);
  ASSERT_TRUE(first->connected());
  (*channel)->Order({.attempt = 1});
  EXPECT_EQ(first->Next(), "attempt 1\n");
  (*channel)->Order({.attempt = 2, .pod_index = 3});
  EXPECT_EQ(first->Next(), "attempt 2 pod 3\n");
  (*channel)->Order({.attempt = 3});
  EXPECT_EQ(first->Next(), "attempt 3 pod 3\n");

  ASSERT_TRUE(
      first->Send(launch::FormatEnded({3, 1, 1'700'000'000'000, "Error", "rank 7 failed"})));
  ASSERT_TRUE(ended.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(got.attempt, 3);
  EXPECT_EQ(got.message, "rank 7 failed");

  first.reset();
  Launcher again(path);  // cohort-launch restarted with its container.
  ASSERT_TRUE(again.connected());
  EXPECT_EQ(again.Next(), "attempt 3 pod 3\n");
}

}  // namespace
}  // namespace cohort::sidecar
