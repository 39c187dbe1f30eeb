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
#include "libdist/src/await.h"

namespace dist::internal {
namespace pb = ::cohort::coordination::v1;

namespace {

constexpr char kStepDir[] = "cohort/preemption/step";
constexpr char kSyncBarrier[] = "cohort/preemption/sync";

}  // namespace

PreemptionSync::PreemptionSync(cohort::agent::ControlPlane* control, int process_id)
    : control_(control), process_id_(process_id) {}

PreemptionSync::~PreemptionSync() {
  if (thread_.joinable()) thread_.join();
}

bool PreemptionSync::notice_received() const {
  absl::MutexLock lock(&mu_);
  return notice_;
}

void PreemptionSync::OnNotice() {
  absl::MutexLock lock(&mu_);
  if (notice_) return;
  notice_ = true;
  thread_ = std::thread([this] { RunProtocol(); });
}

void PreemptionSync::RunProtocol() {
  pthread_setname_np(pthread_self(), "dist-preempt");
  // Holding the lock freezes this process's step until the sync point is known.
  absl::MutexLock lock(&mu_);
  pb::InsertKeyValueRequest set;
  set.mutable_kv()->set_key(absl::StrCat(kStepDir, "/", process_id_));
  set.mutable_kv()->set_value(absl::StrCat(current_step_));
  set.set_allow_overwrite(true);
  absl::Status s = Await<pb::InsertKeyValueResponse>(
      [&](auto cb) { control_->InsertKeyValue(set, std::move(cb)); }).first;
  if (s.ok()) {
    pb::BarrierRequest barrier;
    barrier.set_barrier_id(kSyncBarrier);
    barrier.set_timeout_ms(absl::ToInt64Milliseconds(kProtocolTimeout));
    s = Await<pb::BarrierResponse>([&](auto cb) { control_->Barrier(barrier, std::move(cb)); }).first;
  }
  int64_t max_step = -1;
  if (s.ok()) {
    pb::GetKeyValueDirRequest dir;
    dir.set_directory(kStepDir);
    auto [status, resp] = Await<pb::GetKeyValueDirResponse>(
        [&](auto cb) { control_->GetKeyValueDir(dir, std::move(cb)); });
    s = status;
    for (const pb::KeyValue& kv : resp.kvs()) {
      int64_t step = -1;
      if (absl::SimpleAtoi(kv.value(), &step)) max_step = std::max(max_step, step);
    }
  }
  if (!s.ok()) {
    protocol_error_ = absl::Status(
        s.code(), absl::StrCat("preemption sync protocol failed: ", s.message()));
    cohort::LogError(protocol_error_.message());
    return;
  }
  sync_point_ = max_step + 1;
  cohort::LogInfo("preemption sync point: step ", *sync_point_, " (largest step reached: ", max_step,
                  ")");
}

absl::StatusOr<bool> PreemptionSync::ReachedSyncPoint(int64_t step) {
  absl::MutexLock lock(&mu_);
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
