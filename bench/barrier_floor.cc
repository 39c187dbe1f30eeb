// barrier-floor: how fast any barrier with one TCP connection per task can be on this machine.
//
//   barrier-floor [--tasks 1024] [--processes 4] [--rounds 200]
//
// A lower bound for coord-bench's barrier workload: no gRPC, no protobuf, no token, no state
// machine. One process runs a single-threaded epoll loop over --tasks loopback TCP connections;
// --processes client processes each hold their share of the connections. A round: every task
// writes a 32-byte "arrive"; when the server has read all of them it writes a 32-byte "release"
// to every connection; each client, once all its tasks are released, starts the next round.
// Prints one JSON object: workload "barrier-floor", tasks, processes, rounds, mean_round_seconds.
// docs/benchmarks.md compares it with Cohort, TCPStore and XLA.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace {

constexpr int kMessageBytes = 32;

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

void NoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Reads one message from each ready connection until `count` messages arrived.
bool ReadMessages(int epoll_fd, int count) {
  epoll_event events[512];
  char buffer[kMessageBytes];
  for (int got = 0; got < count;) {
    int ready = epoll_wait(epoll_fd, events, 512, 30'000);
    if (ready <= 0) return false;
    for (int i = 0; i < ready; ++i) {
      if (read(events[i].data.fd, buffer, kMessageBytes) == kMessageBytes) ++got;
    }
  }
  return true;
}

int Watch(const std::vector<int>& fds) {
  int epoll_fd = epoll_create1(0);
  for (int fd : fds) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &e);
  }
  return epoll_fd;
}

[[noreturn]] void Client(int port, int tasks, int rounds) {
  std::vector<int> fds(tasks);
  for (int& fd : fds) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    NoDelay(fd);
    sockaddr_in a = Loopback(port);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(1);
  }
  int epoll_fd = Watch(fds);
  char arrive[kMessageBytes] = "arrive";
  for (int r = 0; r < rounds; ++r) {
    for (int fd : fds) {
      if (write(fd, arrive, kMessageBytes) != kMessageBytes) _exit(1);
    }
    if (!ReadMessages(epoll_fd, tasks)) _exit(1);
  }
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  int tasks = 1024, processes = 4, rounds = 200;
  CLI::App app{"barrier-floor: a barrier over raw TCP and epoll, the floor for any transport"};
  app.add_option("--tasks", tasks, "Tasks, one connection each")
      ->capture_default_str()
      ->check(CLI::Range(2, 60000));
  app.add_option("--processes", processes, "Client processes")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--rounds", rounds, "Barrier rounds")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  if (tasks % processes != 0) {
    std::fprintf(stderr, "barrier-floor: --tasks must be a multiple of --processes\n");
    return 2;
  }

  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = Loopback(0);
  socklen_t length = sizeof a;
  if (bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(listener, 4096) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&a), &length) != 0) {
    std::perror("barrier-floor: listen");
    return 1;
  }
  for (int p = 0; p < processes; ++p) {
    if (fork() == 0) {
      close(listener);
      Client(ntohs(a.sin_port), tasks / processes, rounds);
    }
  }
  std::vector<int> connections;
  while (static_cast<int>(connections.size()) < tasks) {
    int c = accept(listener, nullptr, nullptr);
    if (c < 0) {
      std::perror("barrier-floor: accept");
      return 1;
    }
    NoDelay(c);
    connections.push_back(c);
  }
  int epoll_fd = Watch(connections);
  char release[kMessageBytes] = "release";
  absl::Time start = absl::Now();
  bool ok = true;
  for (int r = 0; r < rounds && ok; ++r) {
    ok = ReadMessages(epoll_fd, tasks);
    for (int c : connections) ok = ok && write(c, release, kMessageBytes) == kMessageBytes;
  }
  double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  int status = 0;
  while (wait(&status) > 0) ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!ok) {
    std::fprintf(stderr, "barrier-floor: a client failed or timed out\n");
    return 1;
  }
  nlohmann::json result = {{"workload", "barrier-floor"}, {"tasks", tasks},
                           {"processes", processes},      {"rounds", rounds},
                           {"seconds", seconds},          {"mean_round_seconds", seconds / rounds}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}
