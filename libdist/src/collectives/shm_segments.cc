#include "libdist/src/collectives/shm_segments.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "libdist/src/collectives/poll_util.h"
#include "libdist/src/collectives/shm_backend.h"

namespace dist::internal {
namespace {

sockaddr_un AbstractAddress(const std::string& name, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  addr.sun_path[0] = '\0';
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

bool SendFd(int sock, int fd, uint32_t rank) {
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{&rank, sizeof(rank)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return sendmsg(sock, &msg, MSG_NOSIGNAL) == sizeof(rank);
}

// The fd and the sender's rank; -1 on failure.
int ReceiveFd(int sock, uint32_t* rank) {
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{rank, sizeof(*rank)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != sizeof(*rank)) return -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
      return fd;
    }
  }
  return -1;
}

}  // namespace

absl::StatusOr<SharedSegment> SharedSegment::Create(size_t bytes) {
  const int fd = static_cast<int>(syscall(SYS_memfd_create, "cohort-collectives", MFD_CLOEXEC));
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("memfd_create failed: ", std::strerror(errno),
                                            "; set COHORT_HOST_TRANSPORT=tcp to avoid shared "
                                            "memory"));
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("could not size a ", bytes,
                                            "-byte shared-memory segment: ", std::strerror(e)));
  }
  return Map(fd, bytes);
}

absl::StatusOr<SharedSegment> SharedSegment::Map(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    return absl::InternalError(
        absl::StrCat("could not map a ", bytes, "-byte shared-memory segment: ", std::strerror(e)));
  }
  SharedSegment s;
  s.data_ = static_cast<uint8_t*>(p);
  s.size_ = bytes;
  s.fd_ = fd;
  return s;
}

SharedSegment::SharedSegment(SharedSegment&& other) noexcept { *this = std::move(other); }

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  if (this != &other) {
    this->~SharedSegment();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

SharedSegment::~SharedSegment() {
  if (data_) munmap(data_, size_);
  CloseFd();
  data_ = nullptr;
}

void SharedSegment::CloseFd() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

absl::StatusOr<SegmentServer> SegmentServer::Start() {
  std::random_device rd;
  SegmentServer s;
  s.name_ = absl::StrFormat("cohort-coll-%08x%08x", rd(), rd());
  s.fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  socklen_t len = 0;
  sockaddr_un addr = AbstractAddress(s.name_, &len);
  if (s.fd_ < 0 || bind(s.fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(s.fd_, 4096) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on an abstract Unix socket for shared memory (",
                     std::strerror(errno), "); set COHORT_HOST_TRANSPORT=tcp"));
  }
  return s;
}

SegmentServer::SegmentServer(SegmentServer&& other) noexcept { *this = std::move(other); }
SegmentServer& SegmentServer::operator=(SegmentServer&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    name_ = std::move(other.name_);
  }
  return *this;
}
SegmentServer::~SegmentServer() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::vector<SharedSegment>> ExchangeSegments(
    int rank, const std::vector<int>& local, const std::vector<std::string>& names,
    SegmentServer& server, SharedSegment mine, const RankNames& rank_names, absl::Time deadline) {
  std::vector<SharedSegment> segments(names.size());
  std::vector<int> outgoing(names.size(), -1);
  auto close_all = [&] {
    for (int& fd : outgoing) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  };
  // Connect to every local peer (completes into its backlog before it accepts).
  for (int peer : local) {
    if (peer == rank) continue;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t len = 0;
    sockaddr_un addr = AbstractAddress(names[peer], &len);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      const int e = errno;
      if (fd >= 0) close(fd);
      close_all();
      return absl::UnavailableError(absl::StrCat(
          "cannot reach ", rank_names.Name(peer), "'s shared-memory socket (", std::strerror(e),
          "): is it in another network namespace? Set COHORT_HOST_TRANSPORT=tcp"));
    }
    outgoing[peer] = fd;
  }
  // Hand this rank's segment to each peer that connected.
  for (size_t handed = 0; handed + 1 < local.size();) {
    if (!WaitFd(server.fd(), POLLIN, deadline)) {
      close_all();
      return absl::DeadlineExceededError(absl::StrCat("not every rank on this host connected to ",
                                                      rank_names.Name(rank),
                                                      "'s shared-memory socket in time"));
    }
    int fd = accept4(server.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const bool sent = SendFd(fd, mine.fd(), static_cast<uint32_t>(rank));
    close(fd);
    if (sent) ++handed;
  }
  // Map the peers' segments.
  for (int peer : local) {
    if (peer == rank) continue;
    if (!WaitFd(outgoing[peer], POLLIN, deadline)) {
      close_all();
      return absl::DeadlineExceededError(absl::StrCat(
          rank_names.Name(peer), " did not hand over its shared-memory segment in time"));
    }
    uint32_t sender = 0;
    const int fd = ReceiveFd(outgoing[peer], &sender);
    if (fd < 0 || sender != static_cast<uint32_t>(peer)) {
      if (fd >= 0) close(fd);
      close_all();
      return absl::InternalError(
          absl::StrCat("bad shared-memory handover from ", rank_names.Name(peer)));
    }
    absl::StatusOr<SharedSegment> seg = SharedSegment::Map(fd, ShmBackend::SegmentBytes());
    if (!seg.ok()) {
      close_all();
      return seg.status();
    }
    seg->CloseFd();
    segments[peer] = std::move(*seg);
  }
  close_all();
  mine.CloseFd();
  segments[rank] = std::move(mine);
  return segments;
}

}  // namespace dist::internal
