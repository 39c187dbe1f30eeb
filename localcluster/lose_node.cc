#include "localcluster/lose_node.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"

namespace cohort::local {

absl::Status LoseLocalNode(const std::string& cluster_dir, const std::string& node) {
  const std::string pid_file = absl::StrCat(cluster_dir, "/nodes/", node, "/kubelet.pid");
  std::optional<std::string> text = ReadFile(pid_file);
  pid_t pid = 0;
  if (!text || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &pid) || pid <= 0) {
    return absl::NotFoundError(absl::StrCat("no kubelet pid in ", pid_file));
  }
  // A pidfd tells when the process is gone (it is the cluster's child, not ours to wait for).
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0)
    return absl::NotFoundError(
        absl::StrCat("kubelet of ", node, " (pid ", pid, ") is not running"));
  if (kill(pid, SIGKILL) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("kill -9 ", pid, ": ", strerror(errno)));
  }
  pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
  int ready = poll(&p, 1, 10000);
  close(fd);
  if (ready != 1)
    return absl::DeadlineExceededError(
        absl::StrCat("kubelet ", pid, " still running 10 s after SIGKILL"));
  return absl::OkStatus();
}

}  // namespace cohort::local
