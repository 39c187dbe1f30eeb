#include "sidecar/launch_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/process/subprocess.h"

namespace cohort::sidecar {
namespace {

bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LaunchChannel>> LaunchChannel::Serve(
    const std::string& path, std::optional<int32_t> attempt,
    std::function<void(const launch::AttemptEnded&)> on_ended) {
  std::unique_ptr<LaunchChannel> c(new LaunchChannel());
  c->path_ = path;
  c->on_ended_ = std::move(on_ended);
  {
    absl::MutexLock lock(&c->mu_);
    if (attempt) c->order_ = launch::AttemptOrder{.attempt = *attempt};
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("launch socket path '", path, "' is too long for a Unix socket"));
  }
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  std::error_code ec;
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::filesystem::remove(p, ec);
  c->listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->listen_fd_ < 0 ||
      bind(c->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(c->listen_fd_, 4) != 0 || pipe2(c->wake_, O_CLOEXEC) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot serve the launch socket ", path, ": ",
                                                   std::strerror(errno),
                                                   "; its directory must exist and be writable"));
  }
  c->accept_thread_ = std::thread([ch = c.get()] { ch->AcceptLoop(); });
  return c;
}

LaunchChannel::~LaunchChannel() {
  if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
  if (accept_thread_.joinable()) accept_thread_.join();
  {
    absl::MutexLock lock(&mu_);
    if (conn_fd_ >= 0) shutdown(conn_fd_, SHUT_RDWR);
  }
  if (read_thread_.joinable()) read_thread_.join();
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

void LaunchChannel::Order(launch::AttemptOrder order) {
  absl::MutexLock lock(&mu_);
  if (order.pod_index) pod_index_ = order.pod_index;  // A slot taken stays taken.
  order.pod_index = pod_index_;
  order_ = order;
  if (conn_fd_ >= 0) WriteAll(conn_fd_, launch::FormatOrder(order));
}

void LaunchChannel::HoldPodIndex(int32_t pod_index) {
  absl::MutexLock lock(&mu_);
  pod_index_ = pod_index;
}

void LaunchChannel::AcceptLoop() {
  pthread_setname_np(pthread_self(), "launch-accept");
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    {
      absl::MutexLock lock(&mu_);
      if (conn_fd_ >= 0) shutdown(conn_fd_, SHUT_RDWR);  // Its reader closes it.
    }
    if (read_thread_.joinable()) read_thread_.join();
    {
      absl::MutexLock lock(&mu_);
      conn_fd_ = fd;
      if (order_) {
        launch::AttemptOrder order = *order_;
        order.pod_index = pod_index_;
        WriteAll(fd, launch::FormatOrder(order));
      }
    }
    read_thread_ = std::thread([this, fd] { ReadLoop(fd); });
  }
}

void LaunchChannel::ReadLoop(int fd) {
  pthread_setname_np(pthread_self(), "launch-read");
  LineReader reader(fd);
  bool open = true;
  while (open) {
    std::vector<std::string> lines;
    open = reader.Read(&lines);
    for (const std::string& line : lines) {
      if (std::optional<launch::AttemptEnded> ended = launch::ParseEnded(line)) {
        on_ended_(*ended);
      } else {
        LogWarning("launch socket: ignoring an unknown message from cohort-launch: ", line);
      }
    }
  }
  absl::MutexLock lock(&mu_);
  if (conn_fd_ == fd) conn_fd_ = -1;
  close(fd);
}

}  // namespace cohort::sidecar
