#include "libdist/src/hang_dump.h"

#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cxxabi.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/debugging/symbolize.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/hang_evidence.h"
#include "libdist/src/collectives/flight_recorder.h"

namespace dist::internal {
namespace {

constexpr int kMaxFrames = 64;

// The one request in flight: the thread asked, and the frames it recorded. The handler of that
// thread claims it (target: tid -> -tid) before it writes, so that a handler that runs late, after
// the dumping thread gave up on it, writes nothing; the dumping thread reads the frames once
// `depth` is set, and after a timeout takes the request back (tid -> 0) or, if the handler claimed
// it meanwhile, waits for its frames.
// A claimed request's handler posts `answered` once its frames are in (sem_post is
// async-signal-safe), so every post is taken by the one wait for that request.
struct Capture {
  std::atomic<pid_t> target{0};
  void* frames[kMaxFrames];
  std::atomic<int> depth{-1};
  sem_t answered;
};
Capture g_capture;

// Waits (restarting after EINTR) for the handler's post, until `deadline` on CLOCK_MONOTONIC
// (none: for good). False when the deadline passed.
bool AwaitAnswer(const timespec* deadline) {
  while (true) {
    const int rc = deadline != nullptr
                       ? sem_clockwait(&g_capture.answered, CLOCK_MONOTONIC, deadline)
                       : sem_wait(&g_capture.answered);
    if (rc == 0) return true;
    if (errno != EINTR) return false;
  }
}

pid_t Gettid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// CLOCK_MONOTONIC's reading, the clock sem_clockwait's deadlines are on.
absl::Duration MonotonicNow() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return absl::DurationFromTimespec(now);
}

void OnStackSignal(int, siginfo_t* info, void*) {
  // Only this process's own requests, and only in the thread asked (a late answer of a thread
  // that timed out is dropped).
  if (info->si_code != SI_TKILL || info->si_pid != getpid()) return;
  const int saved_errno = errno;
  const pid_t self = Gettid();
  pid_t expected = self;
  if (g_capture.target.compare_exchange_strong(expected, -self, std::memory_order_acq_rel)) {
    // backtrace() loads libgcc_s on first use: it ran once outside any handler (StackSignal).
    // It is not on POSIX's async-signal-safe list (libgcc's unwinder takes a lock for frames
    // registered at run time, e.g. by a JIT); the same trade as glog's and folly's signal-time
    // stack traces, for a dump asked for only when the job already hangs.
    const int n = backtrace(g_capture.frames, kMaxFrames);
    g_capture.depth.store(n, std::memory_order_release);
    sem_post(&g_capture.answered);
  }
  errno = saved_errno;
}

bool IsOurs(int sig) {
  struct sigaction now {};
  return sig != 0 && sigaction(sig, nullptr, &now) == 0 && (now.sa_flags & SA_SIGINFO) != 0 &&
         now.sa_sigaction == OnStackSignal;
}

// A real-time signal no one else handles, with OnStackSignal installed; 0 if there is none. It
// stays installed (a thread that blocked it may take it long after the dump), until the program
// takes it for itself: then another is chosen. Called under the dump's lock.
int StackSignal() {
  static int sig = 0;
  static const bool semaphore = sem_init(&g_capture.answered, 0, 0) == 0;
  if (!semaphore) return 0;
  if (IsOurs(sig)) return sig;
  static const bool warmed = [] {
    void* warm[1];
    return backtrace(warm, 1) >= 0;
  }();
  (void)warmed;
  sig = 0;
  for (int s = SIGRTMAX - 2; s >= SIGRTMIN + 2; --s) {
    struct sigaction old {};
    if (sigaction(s, nullptr, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_sigaction = OnStackSignal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(s, &sa, nullptr) == 0) {
      sig = s;
      break;
    }
  }
  return sig;
}

// A /proc file's text without its trailing newline; "" when unreadable.
std::string ReadSmallFile(const std::string& path) {
  return std::string(absl::StripTrailingAsciiWhitespace(cohort::ReadFile(path).value_or("")));
}

std::vector<pid_t> Threads() {
  std::vector<pid_t> tids;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return tids;
  while (dirent* e = readdir(dir)) {
    pid_t tid = 0;
    if (absl::SimpleAtoi(e->d_name, &tid)) tids.push_back(tid);
  }
  closedir(dir);
  std::sort(tids.begin(), tids.end());
  return tids;
}

// "R", "S", "D", "T"...: the state letter of /proc/self/task/<tid>/stat.
std::string StateOf(const std::string& task_dir) {
  const std::string stat = ReadSmallFile(task_dir + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return "?";
  return stat.substr(paren + 2, 1);
}

bool Blocks(const std::string& task_dir, int sig) {
  for (absl::string_view line : absl::StrSplit(ReadSmallFile(task_dir + "/status"), '\n')) {
    if (!absl::ConsumePrefix(&line, "SigBlk:")) continue;
    uint64_t mask = 0;
    return absl::SimpleHexAtoi(absl::StripAsciiWhitespace(line), &mask) && (mask >> (sig - 1)) & 1;
  }
  return false;
}

std::string FormatFrames(void* const* frames, int depth, bool from_handler) {
  int first = 0;
  if (from_handler) {
    // Past the handler and the kernel's signal trampoline, to the interrupted code.
    for (int i = 0; i < depth; ++i) {
      char name[256];
      if (absl::Symbolize(frames[i], name, sizeof name) && std::strcmp(name, "__restore_rt") == 0) {
        first = i + 1;
        break;
      }
    }
    if (first == 0) first = std::min(depth, 2);
  }
  std::string out;
  for (int i = first; i < depth; ++i) {
    // A return address names the instruction after the call: look up the call itself.
    const bool exact = from_handler && i == first;
    const char* pc = static_cast<const char*>(frames[i]) - (exact ? 0 : 1);
    char name[1024];
    std::string symbol = absl::Symbolize(pc, name, sizeof name) ? name : "??";
    if (symbol.rfind("_Z", 0) == 0) {  // Abseil's demangler gave up (ABI tags): the C++ runtime's.
      int status = 0;
      if (char* demangled = abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status);
          demangled != nullptr) {
        symbol = demangled;
        std::free(demangled);
      }
    }
    Dl_info info{};
    std::string module = "?";
    if (dladdr(pc, &info) != 0 && info.dli_fname != nullptr) {
      module = info.dli_fname;
      if (size_t slash = module.rfind('/'); slash != std::string::npos)
        module = module.substr(slash + 1);
    }
    absl::StrAppend(&out, "  #", i - first, " 0x",
                    absl::Hex(reinterpret_cast<uintptr_t>(frames[i]), absl::kZeroPad12), " ",
                    symbol, " (", module, ")\n");
  }
  return out;
}

}  // namespace

std::string ThreadStacks(absl::Duration per_thread) {
  static absl::Mutex dump_mu(absl::kConstInit);
  absl::MutexLock lock(&dump_mu);
  const int sig = StackSignal();
  const pid_t self = Gettid();
  const std::vector<pid_t> tids = Threads();
  std::string out = absl::StrCat(
      "native stacks of process ", getpid(), ", ", tids.size(), " threads",
      sig == 0 ? " (no real-time signal is free: only this thread's frames)" : "", "\n");
  for (pid_t tid : tids) {
    const std::string task_dir = absl::StrCat("/proc/self/task/", tid);
    const std::string wchan = ReadSmallFile(task_dir + "/wchan");
    absl::StrAppend(&out, "\nThread ", tid, " (", ReadSmallFile(task_dir + "/comm"), ") ",
                    StateOf(task_dir), tid == getpid() ? ", the main thread" : "",
                    wchan.empty() || wchan == "0" ? "" : absl::StrCat(", in ", wchan), ":\n");
    if (tid == self) {
      void* frames[kMaxFrames];
      absl::StrAppend(&out, FormatFrames(frames, backtrace(frames, kMaxFrames), false));
      continue;
    }
    if (sig == 0) continue;
    if (Blocks(task_dir, sig)) {
      absl::StrAppend(&out, "  (it blocks signal ", sig, ": no frames)\n");
      continue;
    }
    g_capture.depth.store(-1, std::memory_order_relaxed);
    g_capture.target.store(tid, std::memory_order_release);
    if (syscall(SYS_tgkill, getpid(), tid, sig) != 0) {
      g_capture.target.store(0);
      absl::StrAppend(&out, "  (gone)\n");
      continue;
    }
    const timespec deadline = absl::ToTimespec(MonotonicNow() + per_thread);
    bool answered = AwaitAnswer(&deadline);
    pid_t unclaimed = tid;
    if (!answered &&
        !g_capture.target.compare_exchange_strong(unclaimed, 0, std::memory_order_acq_rel)) {
      answered =
          AwaitAnswer(nullptr);  // Its handler claimed the request just now: its frames follow.
    }
    const int depth = answered ? g_capture.depth.load(std::memory_order_acquire) : -1;
    g_capture.target.store(0, std::memory_order_release);
    if (depth < 0) {
      absl::StrAppend(&out, "  (no answer within ", absl::FormatDuration(per_thread),
                      ": stopped, or in the kernel without end)\n");
      continue;
    }
    absl::StrAppend(&out, FormatFrames(g_capture.frames, depth, true));
  }
  return out;
}

absl::Status WriteHangDump(uint64_t id, const std::string& directory) {
  const std::string stacks = ThreadStacks();
  FlightRecorder& recorder = FlightRecorder::Get();
  const std::vector<FlightRecorder::Entry> last = recorder.Last(SIZE_MAX);
  const absl::Time now = absl::Now();
  std::string summary = "native stacks of every thread";
  for (auto it = last.rbegin(); it != last.rend(); ++it) {
    if (it->result != "pending") continue;
    absl::StrAppend(&summary, "; in flight: ", it->sig.ToString(), " on ", it->comm, " for ",
                    absl::FormatDuration(absl::Trunc(now - it->started, absl::Seconds(1))));
    break;
  }
  std::string errors;
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{cohort::hang_evidence::kStacksFile, stacks},
        {cohort::hang_evidence::kFlightRecorderFile, recorder.Dump()},
        {cohort::hang_evidence::kDumpedFile, absl::StrCat(id, " ", summary, "\n")}}) {
    if (absl::Status s = cohort::WriteFileAtomically(directory + "/" + name, text); !s.ok()) {
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", s.message());
    }
  }
  if (!errors.empty()) return absl::InternalError(absl::StrCat("hang evidence ", id, ": ", errors));
  return absl::OkStatus();
}

}  // namespace dist::internal
