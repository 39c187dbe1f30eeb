#include "libdist/src/preemption_sync.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <future>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "libdist/src/store.h"

namespace dist::internal {

namespace {

constexpr char kStepDir[] = "cohort/preemption/step";
constexpr char kSyncBarrier[] = "cohort/preemption/sync";

}  // namespace

PreemptionSync::PreemptionSync(cohort::coordination::JobClient* client, int process_id)
    : client_(client), process_id_(process_id) {}

PreemptionSync::~PreemptionSync() {
  if (thread_.joinable()) thread_.join();
}

void PreemptionSync::OnNotice() {
  absl::MutexLock lock(&mu_);
  if (notice_.exchange(true)) return;
  protocol_running_ = true;
  thread_ = std::thread([this, frozen = current_step_] { RunProtocol(frozen); });
}

void PreemptionSync::RunProtocol(int64_t frozen_step) {
  pthread_setname_np(pthread_self(), "dist-preempt");
  // No lock is held across the round trips: ReachedSyncPoint waits on protocol_running_, and
  // notice_received() must answer at once.
  Store store(client_);
  absl::Status s = store.Set(absl::StrCat(kStepDir, "/", process_id_), absl::StrCat(frozen_step));
  if (s.ok()) s = store.Barrier(kSyncBarrier, kProtocolTimeout, {});
  int64_t max_step = -1;
  if (s.ok()) {
    absl::StatusOr<cohort::coordination::KeyValueEntries> steps = store.Dir(kStepDir);
    s = steps.status();
    if (steps.ok()) {
      for (const auto& [key, value] : *steps) {
        int64_t step = -1;
        if (absl::SimpleAtoi(value, &step)) max_step = std::max(max_step, step);
      }
    }
  }
  absl::MutexLock lock(&mu_);
  protocol_running_ = false;
  if (!s.ok()) {
    protocol_error_ =
        absl::Status(s.code(), absl::StrCat("preemption sync protocol failed: ", s.message()));
    cohort::LogError(protocol_error_.message());
    return;
  }
  sync_point_ = max_step + 1;
  cohort::LogInfo("preemption sync point: step ", *sync_point_,
                  " (largest step reached: ", max_step, ")");
}

absl::StatusOr<bool> PreemptionSync::ReachedSyncPoint(int64_t step) {
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !protocol_running_; };
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&settled));
  current_step_ = step;
  if (!protocol_error_.ok()) return protocol_error_;
  if (!sync_point_ || reached_) return false;
  if (step == *sync_point_) {
    reached_ = true;
    return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------

namespace {
std::atomic<int> g_sigterm_pipe_write{-1};
struct sigaction g_previous_sigterm;

void OnSigterm(int) {
  int saved_errno = errno;
  int fd = g_sigterm_pipe_write.load();
  if (fd >= 0) {
    char byte = 1;
    ssize_t ignored = write(fd, &byte, 1);
    (void)ignored;
  }
  errno = saved_errno;
}
}  // namespace

SigtermWatcher::SigtermWatcher(std::function<void()> on_signal) : on_signal_(std::move(on_signal)) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    cohort::LogWarning("cannot create the SIGTERM pipe; preemption notices from SIGTERM are off");
    return;
  }
  g_sigterm_pipe_write.store(fds[1]);
  struct sigaction sa = {};
  sa.sa_handler = OnSigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, &g_previous_sigterm);
  int read_fd = fds[0];
  thread_ = std::thread([this, read_fd] {
    pthread_setname_np(pthread_self(), "dist-sigterm");
    char byte;
    while (true) {
      ssize_t n = read(read_fd, &byte, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || byte == 0) break;  // 0: the destructor's stop byte.
      cohort::LogInfo("SIGTERM received: reporting a preemption notice to the job");
      on_signal_();
    }
    close(read_fd);
  });
}

SigtermWatcher::~SigtermWatcher() {
  int fd = g_sigterm_pipe_write.exchange(-1);
  if (fd < 0) return;
  sigaction(SIGTERM, &g_previous_sigterm, nullptr);
  char stop = 0;
  ssize_t ignored = write(fd, &stop, 1);
  (void)ignored;
  if (thread_.joinable()) thread_.join();
  close(fd);
}

}  // namespace dist::internal
