#include "libdist/src/collectives/tcp_backend.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "libdist/src/collectives/poll_util.h"
#include "libdist/src/collectives/reduce.h"

namespace dist::internal {
namespace {

constexpr uint64_t kHelloMagic = 0x436f686f72744331ull;  // "CohortC1"

struct Hello {
  uint64_t magic;
  uint64_t nonce;
  uint32_t rank;
  uint32_t reserved;
};

struct MessageHeader {
  WireSignature sig;
  uint64_t len;
};
static_assert(sizeof(MessageHeader) == 40);

std::string Errno(const char* what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// host:port -> sockaddr (IPv4 or IPv6; "[v6]:port" accepted).
absl::StatusOr<sockaddr_storage> Resolve(const std::string& address, socklen_t* len) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("bad address '", address, "'"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  sockaddr_storage ss{};
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return ss;
}

bool WriteAll(int fd, const void* data, size_t len, absl::Time deadline) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= n;
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFd(fd, POLLOUT, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t len, absl::Time deadline) {
  auto* p = static_cast<uint8_t*>(data);
  while (len > 0) {
    ssize_t n = recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= n;
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFd(fd, POLLIN, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

// ---- TcpListener ----------------------------------------------------------------------------

absl::StatusOr<TcpListener> TcpListener::Listen(const std::string& host) {
  socklen_t len = 0;
  absl::StatusOr<sockaddr_storage> addr = Resolve(host + ":0", &len);
  if (!addr.ok()) return addr.status();
  TcpListener l;
  l.fd_ = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l.fd_ < 0) return absl::InternalError(Errno("socket"));
  if (bind(l.fd_, reinterpret_cast<sockaddr*>(&*addr), len) != 0 || listen(l.fd_, 4096) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", host, " for the collectives' TCP transport (", std::strerror(errno),
        "); set COHORT_COLLECTIVES_HOST to an address of this host"));
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof(bound);
  getsockname(l.fd_, reinterpret_cast<sockaddr*>(&bound), &blen);
  char buf[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (bound.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&bound);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    port = ntohs(a->sin6_port);
    l.address_ = absl::StrCat("[", buf, "]:", port);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&bound);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    port = ntohs(a->sin_port);
    l.address_ = absl::StrCat(buf, ":", port);
  }
  SetNonBlocking(l.fd_);
  return l;
}

TcpListener::TcpListener(TcpListener&& other) noexcept { *this = std::move(other); }
TcpListener& TcpListener::operator=(TcpListener&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    address_ = std::move(other.address_);
  }
  return *this;
}
TcpListener::~TcpListener() {
  if (fd_ >= 0) close(fd_);
}

// ---- Connection setup ---------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TcpBackend>> TcpBackend::Connect(
    int rank, RankNames names, TcpListener listener, const std::vector<std::string>& addresses,
    uint64_t nonce, absl::Time deadline) {
  const int size = static_cast<int>(addresses.size());
  std::vector<int> fds(size, -1);
  auto close_all = [&] {
    for (int& fd : fds) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  };
  // Dial every higher rank (the kernel completes the handshake before the peer accepts).
  for (int peer = rank + 1; peer < size; ++peer) {
    socklen_t len = 0;
    absl::StatusOr<sockaddr_storage> addr = Resolve(addresses[peer], &len);
    if (!addr.ok()) {
      close_all();
      return addr.status();
    }
    std::string last_error;
    while (fds[peer] < 0) {
      int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      int rc = connect(fd, reinterpret_cast<sockaddr*>(&*addr), len);
      int err = rc == 0 ? 0 : errno;
      if (err == EINPROGRESS && WaitFd(fd, POLLOUT, deadline)) {
        socklen_t elen = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
      }
      if (err == 0) {
        Hello hello{kHelloMagic, nonce, static_cast<uint32_t>(rank), 0};
        if (WriteAll(fd, &hello, sizeof(hello), deadline)) {
          fds[peer] = fd;
          break;
        }
        err = errno;
      }
      close(fd);
      last_error = std::strerror(err == EINPROGRESS ? ETIMEDOUT : err);
      if (absl::Now() >= deadline) {
        close_all();
        return absl::DeadlineExceededError(
            absl::StrCat("could not connect to ", names.Name(peer), " at ", addresses[peer],
                         " for collectives: ", last_error,
                         ". Is the address reachable from this host? (COHORT_COLLECTIVES_HOST "
                         "sets the address a process announces)"));
      }
      absl::SleepFor(absl::Milliseconds(20));  // Refused: retry until the deadline.
    }
  }
  // Accept every lower rank.
  int missing = rank;
  while (missing > 0) {
    if (!WaitFd(listener.fd(), POLLIN, deadline)) {
      std::vector<int> absent;
      for (int peer = 0; peer < rank; ++peer) {
        if (fds[peer] < 0) absent.push_back(peer);
      }
      close_all();
      return absl::DeadlineExceededError(
          absl::StrCat(names.List(absent), " did not connect to ", names.Name(rank),
                       "'s collectives transport at ", listener.address(),
                       " in time; check that hosts can reach each other on ephemeral TCP ports"));
    }
    int fd = accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    Hello hello{};
    const absl::Time hello_deadline = std::min(deadline, absl::Now() + absl::Seconds(10));
    if (!ReadAll(fd, &hello, sizeof(hello), hello_deadline) || hello.magic != kHelloMagic ||
        hello.nonce != nonce || hello.rank >= static_cast<uint32_t>(rank) || fds[hello.rank] >= 0) {
      close(fd);  // A stray or stale connection.
      continue;
    }
    fds[hello.rank] = fd;
    --missing;
  }
  for (int fd : fds) {
    if (fd >= 0) SetNoDelay(fd);
  }
  return std::unique_ptr<TcpBackend>(new TcpBackend(rank, std::move(names), std::move(fds)));
}

TcpBackend::TcpBackend(int rank, RankNames names, std::vector<int> fds)
    : rank_(rank),
      size_(static_cast<int>(fds.size())),
      names_(std::move(names)),
      fds_(std::move(fds)),
      abort_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

std::unique_ptr<TcpBackend> TcpBackend::Subset(const TcpBackend& full,
                                               const std::vector<int>& members) {
  RankNames names;
  std::vector<int> fds;
  int rank = -1;
  for (int i = 0; i < static_cast<int>(members.size()); ++i) {
    const int m = members[i];
    names.processes.push_back(full.names_.processes[m]);
    if (m == full.rank_) {
      rank = i;
      fds.push_back(-1);
    } else {
      fds.push_back(fcntl(full.fds_[m], F_DUPFD_CLOEXEC, 0));
    }
  }
  return std::unique_ptr<TcpBackend>(new TcpBackend(rank, std::move(names), std::move(fds)));
}

TcpBackend::~TcpBackend() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
  if (abort_fd_ >= 0) close(abort_fd_);
}

std::string TcpBackend::Describe() const { return "host backend over TCP"; }

void TcpBackend::Abort() {
  aborted_.store(true);
  uint64_t one = 1;
  ssize_t ignored = write(abort_fd_, &one, sizeof(one));
  (void)ignored;
}

uint8_t* TcpBackend::Scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

// ---- The poll loop ------------------------------------------------------------------------

struct TcpBackend::Transfer {
  int peer = -1;
  bool is_send = false;
  MessageHeader header{};
  size_t header_done = 0;
  uint8_t* data = nullptr;
  size_t len = 0;
  size_t done = 0;
  const Transfer* source = nullptr;                     // A send that relays this receive.
  const size_t* available = nullptr;                    // A send of bytes still being produced.
  const Transfer* after = nullptr;                      // Starts once this one completed.
  std::function<void(size_t from, size_t to)> on_data;  // A receive's newly arrived bytes.

  bool complete() const { return header_done == sizeof(header) && done == len; }
  bool ready() const { return after == nullptr || after->complete(); }
  size_t sendable() const { return available ? *available : source ? source->done : len; }
};

absl::Status TcpBackend::Drive(std::vector<Transfer*> transfers, const OpSignature& sig,
                               absl::Time deadline) {
  std::vector<pollfd> fds;
  while (true) {
    if (aborted_.load()) return absl::AbortedError("the communicator was aborted");
    fds.clear();
    std::map<int, size_t> index;  // fd -> position in fds
    bool all_done = true;
    for (Transfer* t : transfers) {
      if (t->complete()) continue;
      all_done = false;
      if (!t->ready()) continue;
      short ev = t->is_send ? POLLOUT : POLLIN;
      if (t->is_send && t->header_done == sizeof(t->header) && t->done >= t->sendable()) continue;
      const int fd = fds_[t->peer];
      auto [it, inserted] = index.emplace(fd, fds.size());
      if (inserted) fds.push_back(pollfd{fd, 0, 0});
      fds[it->second].events |= ev;
    }
    if (all_done) return absl::OkStatus();
    fds.push_back(pollfd{abort_fd_, POLLIN, 0});
    int rc = poll(fds.data(), fds.size(), MillisUntil(deadline));
    if (rc < 0 && errno != EINTR) return absl::InternalError(Errno("poll"));
    if (fds.back().revents) return absl::AbortedError("the communicator was aborted");
    if (rc == 0 && absl::Now() >= deadline) {
      // Whose data never came; failing that, who did not take ours.
      std::vector<int> waiting_for, not_reading;
      for (Transfer* t : transfers) {
        if (t->complete() || !t->ready()) continue;
        std::vector<int>& list = t->is_send ? not_reading : waiting_for;
        if (std::find(list.begin(), list.end(), t->peer) == list.end()) list.push_back(t->peer);
      }
      return absl::DeadlineExceededError(
          waiting_for.empty()
              ? absl::StrCat(sig.ToString(), " did not complete in time on ", names_.Name(rank_),
                             ": ", names_.List(not_reading),
                             " did not read what this rank sent (stuck before or in it)")
              : absl::StrCat(sig.ToString(), " did not complete in time on ", names_.Name(rank_),
                             ": waiting for data from ", names_.List(waiting_for),
                             " (not in this collective yet, or stuck in it)"));
    }
    for (Transfer* t : transfers) {
      if (t->complete() || !t->ready()) continue;
      const int fd = fds_[t->peer];
      // Move as much as the socket takes now.
      while (!t->complete()) {
        ssize_t n;
        if (t->is_send) {
          if (t->header_done < sizeof(t->header)) {
            n = send(fd, reinterpret_cast<uint8_t*>(&t->header) + t->header_done,
                     sizeof(t->header) - t->header_done, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) t->header_done += n;
          } else {
            const size_t limit = t->sendable();
            if (t->done >= limit) break;
            n = send(fd, t->data + t->done, limit - t->done, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) t->done += n;
          }
        } else {
          if (t->header_done < sizeof(t->header)) {
            n = recv(fd, reinterpret_cast<uint8_t*>(&t->header) + t->header_done,
                     sizeof(t->header) - t->header_done, MSG_DONTWAIT);
            if (n > 0) {
              t->header_done += n;
              if (t->header_done == sizeof(t->header)) {
                const OpSignature theirs = FromWire(t->header.sig);
                if (!theirs.SameCall(sig) || t->header.len != t->len) {
                  return absl::FailedPreconditionError(absl::StrCat(
                      "collective mismatch: ", names_.Name(t->peer), " called ", theirs.ToString(),
                      " while ", names_.Name(rank_), " called ", sig.ToString(),
                      "; every rank must call the same collectives in the same order"));
                }
              }
            }
          } else {
            n = recv(fd, t->data + t->done, t->len - t->done, MSG_DONTWAIT);
            if (n > 0) {
              const size_t from = t->done;
              t->done += n;
              if (t->on_data) t->on_data(from, t->done);
            }
          }
        }
        if (n == 0 && !t->is_send) {
          return absl::InternalError(absl::StrCat("the connection to ", names_.Name(t->peer),
                                                  " closed during ", sig.ToString(),
                                                  " (did it exit?)"));
        }
        if (n < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          if (errno == EINTR) continue;
          return absl::InternalError(absl::StrCat("the connection to ", names_.Name(t->peer),
                                                  " failed during ", sig.ToString(), ": ",
                                                  std::strerror(errno)));
        }
      }
    }
  }
}

absl::Status TcpBackend::SendRecv(int to, const void* send, size_t send_len, int from, void* recv,
                                  size_t recv_len, const OpSignature& sig, absl::Time deadline) {
  Transfer out, in;
  out.peer = to;
  out.is_send = true;
  out.header = MessageHeader{ToWire(sig), send_len};
  out.data = const_cast<uint8_t*>(static_cast<const uint8_t*>(send));
  out.len = send_len;
  in.peer = from;
  in.data = static_cast<uint8_t*>(recv);
  in.len = recv_len;
  return Drive({&out, &in}, sig, deadline);
}

// ---- Algorithms ---------------------------------------------------------------------------

absl::Status TcpBackend::Run(const CollectiveCall& call) {
  if (aborted_.load()) return absl::AbortedError("the communicator was aborted");
  switch (call.sig.kind) {
    case CollectiveKind::kAllReduce:
      return AllReduce(call);
    case CollectiveKind::kAllGather:
      return AllGather(call);
    case CollectiveKind::kReduceScatter:
      return ReduceScatter(call);
    case CollectiveKind::kBroadcast:
      return Broadcast(call);
    case CollectiveKind::kAllToAll:
      return AllToAll(call);
    case CollectiveKind::kBarrier:
      return Barrier(call);
  }
  return absl::InvalidArgumentError("unknown collective");
}

absl::Status TcpBackend::RingReduceScatter(uint8_t* work, const std::vector<Range>& blocks,
                                           DataType acc_type, ReduceOp op, const OpSignature& sig,
                                           absl::Time deadline) {
  if (size_ == 1) return absl::OkStatus();
  const size_t aes = DataTypeSize(acc_type);
  size_t largest = 0;
  for (const Range& b : blocks) largest = std::max(largest, b.size);
  if (scratch2_.size() < largest * aes) scratch2_.resize(largest * aes);
  uint8_t* tmp = scratch2_.data();
  const ReduceOp step_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  // All P-1 steps in flight at once, pipelined: step i+1 sends the block step i receives, as
  // soon as each part of it has arrived and been reduced (messages on one connection still go
  // in order). Step i+1 receives into `tmp` only after step i's receive completed, and that
  // receive reduces what it gets as it gets it, so `tmp` is free again by then.
  const int steps = size_ - 1;
  std::vector<Transfer> sends(steps), recvs(steps);
  std::vector<size_t> reduced(steps, 0);  // Elements of step i's block reduced so far.
  std::vector<size_t> reduced_bytes(steps, 0);
  std::vector<Transfer*> all;
  for (int i = 0; i < steps; ++i) {
    const Range& out = blocks[Prev(1 + i)];
    const Range& in = blocks[Prev(2 + i)];
    Transfer& send_t = sends[i];
    send_t.peer = Next();
    send_t.is_send = true;
    send_t.header = MessageHeader{ToWire(sig), out.size * aes};
    send_t.data = work + out.begin * aes;
    send_t.len = out.size * aes;
    if (i > 0) {
      send_t.after = &sends[i - 1];
      send_t.available = &reduced_bytes[i - 1];
    }
    Transfer& recv_t = recvs[i];
    recv_t.peer = Prev();
    recv_t.data = tmp;
    recv_t.len = in.size * aes;
    if (i > 0) recv_t.after = &recvs[i - 1];
    uint8_t* acc = work + in.begin * aes;
    recv_t.on_data = [&, i, acc](size_t, size_t to) {
      const size_t ready = to / aes;
      if (ready > reduced[i]) {
        const void* inputs[2] = {tmp + reduced[i] * aes, acc + reduced[i] * aes};
        ReduceInto(acc_type, step_op, inputs, 2, acc + reduced[i] * aes, ready - reduced[i], size_);
        reduced[i] = ready;
        reduced_bytes[i] = ready * aes;
      }
    };
    all.push_back(&send_t);
    all.push_back(&recv_t);
  }
  return Drive(std::move(all), sig, deadline);
}

absl::Status TcpBackend::RingAllGather(uint8_t* data, const std::vector<Range>& blocks,
                                       DataType type, const OpSignature& sig, absl::Time deadline) {
  if (size_ == 1) return absl::OkStatus();
  const size_t es = DataTypeSize(type);
  // Pipelined like the reduce-scatter: step i+1 forwards what step i receives as it arrives.
  const int steps = size_ - 1;
  std::vector<Transfer> sends(steps), recvs(steps);
  std::vector<Transfer*> all;
  for (int i = 0; i < steps; ++i) {
    const Range& out = blocks[Prev(i)];
    const Range& in = blocks[Prev(i + 1)];
    Transfer& send_t = sends[i];
    send_t.peer = Next();
    send_t.is_send = true;
    send_t.header = MessageHeader{ToWire(sig), out.size * es};
    send_t.data = data + out.begin * es;
    send_t.len = out.size * es;
    if (i > 0) {
      send_t.after = &sends[i - 1];
      send_t.source = &recvs[i - 1];
    }
    Transfer& recv_t = recvs[i];
    recv_t.peer = Prev();
    recv_t.data = data + in.begin * es;
    recv_t.len = in.size * es;
    if (i > 0) recv_t.after = &recvs[i - 1];
    all.push_back(&send_t);
    all.push_back(&recv_t);
  }
  return Drive(std::move(all), sig, deadline);
}

absl::Status TcpBackend::AllReduce(const CollectiveCall& call) {
  const DataType type = call.sig.type;
  const DataType acc = AccumulationType(type);
  const size_t es = DataTypeSize(type), aes = DataTypeSize(acc);
  const size_t n = call.sig.count;
  auto* recv = static_cast<uint8_t*>(call.recv);
  uint8_t* work = recv;
  if (acc != type) {
    work = Scratch(n * aes);
    WidenToAccumulation(type, call.send, work, n);
  } else if (call.send != call.recv && n > 0) {
    std::memcpy(recv, call.send, n * es);
  }
  std::vector<Range> blocks(size_);
  for (int b = 0; b < size_; ++b) blocks[b] = PartOf(n, size_, b);
  if (absl::Status s = RingReduceScatter(work, blocks, acc, call.sig.op, call.sig, call.deadline);
      !s.ok()) {
    return s;
  }
  const Range& mine = blocks[rank_];
  if (call.sig.op == ReduceOp::kAvg) DivideInPlace(acc, work + mine.begin * aes, mine.size, size_);
  if (acc != type) {
    NarrowFromAccumulation(type, work + mine.begin * aes, recv + mine.begin * es, mine.size);
  }
  return RingAllGather(recv, blocks, type, call.sig, call.deadline);
}

absl::Status TcpBackend::ReduceScatter(const CollectiveCall& call) {
  const DataType type = call.sig.type;
  const DataType acc = AccumulationType(type);
  const size_t aes = DataTypeSize(acc);
  const size_t n = call.sig.count;
  uint8_t* work = Scratch(n * size_ * aes);
  WidenToAccumulation(type, call.send, work, n * size_);
  std::vector<Range> blocks(size_);
  for (int b = 0; b < size_; ++b) blocks[b] = Range{b * n, n};
  if (absl::Status s = RingReduceScatter(work, blocks, acc, call.sig.op, call.sig, call.deadline);
      !s.ok()) {
    return s;
  }
  uint8_t* mine = work + rank_ * n * aes;
  if (call.sig.op == ReduceOp::kAvg) DivideInPlace(acc, mine, n, size_);
  NarrowFromAccumulation(type, mine, call.recv, n);
  return absl::OkStatus();
}

absl::Status TcpBackend::AllGather(const CollectiveCall& call) {
  const size_t es = DataTypeSize(call.sig.type);
  const size_t n = call.sig.count;
  auto* recv = static_cast<uint8_t*>(call.recv);
  uint8_t* own = recv + rank_ * n * es;
  if (call.send != own && n > 0) std::memcpy(own, call.send, n * es);
  std::vector<Range> blocks(size_);
  for (int b = 0; b < size_; ++b) blocks[b] = Range{b * n, n};
  if (size_ == 1) return absl::OkStatus();
  return RingAllGather(recv, blocks, call.sig.type, call.sig, call.deadline);
}

absl::Status TcpBackend::Broadcast(const CollectiveCall& call) {
  const size_t bytes = call.sig.count * DataTypeSize(call.sig.type);
  const int root = call.sig.root;
  auto* recv = static_cast<uint8_t*>(call.recv);
  if (rank_ == root && call.send != call.recv && bytes > 0) std::memcpy(recv, call.send, bytes);
  if (size_ == 1) return absl::OkStatus();
  // A chain from the root; each rank forwards what it has received while the rest arrives.
  const int pos = (rank_ - root + size_) % size_;
  Transfer in, out;
  std::vector<Transfer*> transfers;
  if (pos > 0) {
    in.peer = Prev();
    in.data = recv;
    in.len = bytes;
    transfers.push_back(&in);
  }
  if (pos + 1 < size_) {
    out.peer = Next();
    out.is_send = true;
    out.header = MessageHeader{ToWire(call.sig), bytes};
    out.data = recv;
    out.len = bytes;
    if (pos > 0) out.source = &in;
    transfers.push_back(&out);
  }
  return Drive(transfers, call.sig, call.deadline);
}

absl::Status TcpBackend::AllToAll(const CollectiveCall& call) {
  const size_t block = call.sig.count * DataTypeSize(call.sig.type);
  const auto* send = static_cast<const uint8_t*>(call.send);
  auto* recv = static_cast<uint8_t*>(call.recv);
  if (block > 0) std::memcpy(recv + rank_ * block, send + rank_ * block, block);
  for (int i = 1; i < size_; ++i) {
    const int to = Next(i), from = Prev(i);
    if (absl::Status s = SendRecv(to, send + to * block, block, from, recv + from * block, block,
                                  call.sig, call.deadline);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status TcpBackend::Barrier(const CollectiveCall& call) {
  for (int k = 1; k < size_; k *= 2) {
    if (absl::Status s =
            SendRecv(Next(k), nullptr, 0, Prev(k), nullptr, 0, call.sig, call.deadline);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace dist::internal
