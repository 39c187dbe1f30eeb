#include "libdist/src/collectives/flight_recorder.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/env.h"
#include "dist/distributed.h"

namespace dist::internal {
namespace {

int g_dump_pipe[2] = {-1, -1};
struct sigaction g_previous_sigusr2 {};  // The program's own handler, if it had one: still called.

void OnSigusr2(int signo, siginfo_t* info, void* context) {
  const char byte = 1;
  ssize_t ignored = write(g_dump_pipe[1], &byte, 1);
  (void)ignored;
  // A handler installed before libdist's (Python's faulthandler.register, a program's own) runs
  // too: both dumps, not one.
  const struct sigaction& previous = g_previous_sigusr2;
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction != nullptr) previous.sa_sigaction(signo, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN &&
             previous.sa_handler != nullptr) {
    previous.sa_handler(signo);
  }
}

// SIGUSR2 only wakes a thread (nothing else is async-signal-safe); the thread writes the dump.
void InstallDumpOnSigusr2(FlightRecorder* recorder) {
  if (pipe2(g_dump_pipe, O_CLOEXEC) != 0) return;
  std::thread([recorder] {
    pthread_setname_np(pthread_self(), "dist-flightrec");
    char byte;
    for (;;) {
      const ssize_t n = read(g_dump_pipe[0], &byte, 1);
      if (n < 0 && errno == EINTR) continue;  // Another signal (a handler without SA_RESTART).
      if (n <= 0) break;
      const std::string dump = recorder->Dump();
      ssize_t ignored = write(STDERR_FILENO, dump.data(), dump.size());
      (void)ignored;
    }
  }).detach();
  struct sigaction sa {};
  sa.sa_sigaction = OnSigusr2;
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR2, &sa, &g_previous_sigusr2);
}

}  // namespace

FlightRecorder& FlightRecorder::Get() {
  static FlightRecorder* recorder = [] {
    size_t capacity = 2000;
    absl::StatusOr<std::optional<int64_t>> n =
        cohort::env::GetInt(cohort::env::kFlightRecorderEntries);
    if (n.ok() && n->has_value() && **n >= 0) capacity = static_cast<size_t>(**n);
    auto* r = new FlightRecorder(capacity);
    InstallDumpOnSigusr2(r);
    return r;
  }();
  return *recorder;
}

uint64_t FlightRecorder::Start(const std::string& comm, const OpSignature& sig,
                               absl::Time started) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  if (capacity_ == 0) return id;
  if (ring_.size() < capacity_) ring_.emplace_back();
  // Reuse the slot's strings: no allocation per call once the ring is full.
  Entry& e = ring_[(id - 1) % capacity_];
  e.id = id;
  e.comm.assign(comm);
  e.sig = sig;
  e.started = started;
  e.ended = absl::InfinitePast();
  e.result.assign("pending");
  return id;
}

void FlightRecorder::End(uint64_t id) {
  absl::MutexLock lock(&mu_);
  if (capacity_ == 0 || ring_.empty()) return;
  Entry& e = ring_[(id - 1) % capacity_];
  if (e.id == id) e.result.assign("ok");
}

void FlightRecorder::End(uint64_t id, std::string error, absl::Time ended) {
  absl::MutexLock lock(&mu_);
  if (capacity_ == 0 || ring_.empty()) return;
  Entry& e = ring_[(id - 1) % capacity_];
  if (e.id != id) return;  // Overwritten already.
  e.ended = ended;
  e.result = std::move(error);
}

std::vector<FlightRecorder::Entry> FlightRecorder::Last(size_t n) const {
  absl::MutexLock lock(&mu_);
  std::vector<Entry> out;
  if (ring_.empty()) return out;
  const size_t count = std::min(n, ring_.size());
  const uint64_t last = next_id_ - 1;
  for (uint64_t id = last + 1 - count; id <= last; ++id) out.push_back(ring_[(id - 1) % capacity_]);
  return out;
}

std::string FlightRecorder::Dump(size_t n) const {
  const std::vector<Entry> entries = Last(n);
  const absl::Time now = absl::Now();
  std::string out =
      absl::StrCat("cohort flight recorder: process ", dist::ProcessIndex(), " (pid ", getpid(),
                   "), the last ", entries.size(), " collectives, oldest first\n");
  for (const Entry& e : entries) {
    absl::StrAppend(&out, "  [", e.comm, "] ", e.sig.ToString(), ": ", e.result);
    if (e.result == "ok") {
      absl::StrAppend(&out, ", started ",
                      absl::FormatDuration(absl::Trunc(now - e.started, absl::Milliseconds(1))),
                      " ago");
    } else if (e.ended == absl::InfinitePast()) {
      absl::StrAppend(&out, " for ",
                      absl::FormatDuration(absl::Trunc(now - e.started, absl::Milliseconds(1))));
    } else {
      absl::StrAppend(
          &out, " in ",
          absl::FormatDuration(absl::Trunc(e.ended - e.started, absl::Microseconds(1))));
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace dist::internal
