#include "dist/distributed.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/failure_cause.h"
#include "common/log.h"
#include "common/termination_message.h"
#include "libdist/src/current_job.h"
#include "libdist/src/failure_handlers.h"
#include "libdist/src/options.h"
#include "libdist/src/preemption_sync.h"
#include "libdist/src/runtime.h"
#include "libdist/src/store.h"

namespace dist {
namespace {

using cohort::coordination::JobEvent;
using cohort::coordination::PreemptionNotice;
using cohort::coordination::TaskFailure;
using internal::FailureHandlers;
using internal::PreemptionSync;
using internal::ResolvedOptions;
using internal::Runtime;
using internal::SigtermWatcher;

// The public enum mirrors common/failure_cause.h enumerator by enumerator (library.cc checks it).
FailureCause ToPublic(cohort::FailureCause cause) { return static_cast<FailureCause>(cause); }

void DefaultPeerFailureHandler(const PeerFailure& failure) {
  std::string line = cohort::FormatPeerFailureLine(
      failure.message, static_cast<cohort::FailureCause>(failure.cause));
  std::fflush(stdout);
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  std::_Exit(kPeerFailureExitCode);
}

// The process's one distributed state. Initialize creates it; Shutdown destroys it.
struct State {
  ~State() {
    // The failure thread, if the last reference went with it, or if Shutdown ran on it.
    if (failure_thread.joinable()) failure_thread.detach();
  }
  cohort::coordination::JobClient* client() { return runtime->client(); }
  internal::Store store() { return internal::Store(runtime->client()); }

  ResolvedOptions options;
  std::function<void(const PeerFailure&)> on_peer_failure;
  FailureHandlers failure_handlers;
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<PreemptionSync> preemption;
  std::unique_ptr<SigtermWatcher> sigterm;
  std::atomic<bool> failed{false};
  absl::Notification failure_handled;  // The program's peer-failure handler returned.

  absl::Mutex mu;
  bool shutting_down ABSL_GUARDED_BY(mu) = false;
  std::optional<PeerFailure> failure ABSL_GUARDED_BY(mu);
  std::atomic<int64_t> sync_global_devices_calls{0};
  // The last training step sent to the agent (ReportProgress), and when.
  absl::Mutex step_mu;
  std::optional<int64_t> step_sent ABSL_GUARDED_BY(step_mu);
  absl::Time step_sent_at ABSL_GUARDED_BY(step_mu);
  // Runs libdist's failure handlers, then the program's, off the event thread.
  std::thread failure_thread ABSL_GUARDED_BY(mu);
  // A preemption notice can arrive while Initialize() is still starting (the sidecar reports one
  // taken before the rank joined as soon as it joined): it is kept until `preemption` exists.
  bool preemption_ready ABSL_GUARDED_BY(mu) = false;
  bool early_notice ABSL_GUARDED_BY(mu) = false;
};

absl::Mutex g_mu;
std::shared_ptr<State> g_state ABSL_GUARDED_BY(g_mu);

std::shared_ptr<State> Current() {
  absl::MutexLock lock(&g_mu);
  return g_state;
}

absl::Status NotInitialized() {
  return absl::FailedPreconditionError(
      "dist::Initialize() has not been called (or Shutdown() already ran); call it first");
}

void HandleEvent(const std::weak_ptr<State>& weak, const JobEvent& event) {
  std::shared_ptr<State> state = weak.lock();
  if (!state) return;
  if (std::holds_alternative<PreemptionNotice>(event)) {
    cohort::LogInfo("preemption notice from process ", std::get<PreemptionNotice>(event).task,
                    "; agreeing on a checkpoint step");
    PreemptionSync* sync = nullptr;
    {
      absl::MutexLock lock(&state->mu);
      if (state->preemption_ready) {
        sync = state->preemption.get();
      } else {
        state->early_notice = true;
      }
    }
    if (sync != nullptr) sync->OnNotice();
    return;
  }
  const auto& f = std::get<TaskFailure>(event);
  if (state->failed.exchange(true)) return;
  PeerFailure failure{f.task, ToPublic(f.cause), f.message};
  // Off the event thread: a handler may take time (aborting communicators), and may call back
  // into libdist (Shutdown).
  absl::MutexLock lock(&state->mu);
  state->failure = failure;
  if (state->shutting_down) return;
  state->failure_thread = std::thread([state, failure] {
    pthread_setname_np(pthread_self(), "dist-failure");
    state->failure_handlers.RunAll(failure);
    state->on_peer_failure(failure);
    state->failure_handled.Notify();
  });
}

// A call that failed because the job failed (ABORTED) or because this process lost its sidecar
// or the service (UNAVAILABLE) returns only after the peer-failure handler ran: the reply can
// overtake the failure event, and a program must not see the error before fate sharing (by
// default: exit 75) takes its course. Bounded, in case no event follows.
constexpr absl::Duration kFailureEventGrace = absl::Seconds(5);
absl::Status Settle(State& state, absl::Status status) {
  if (status.code() == absl::StatusCode::kAborted ||
      status.code() == absl::StatusCode::kUnavailable) {
    state.failure_handled.WaitForNotificationWithTimeout(kFailureEventGrace);
  }
  return status;
}

}  // namespace

const char* FailureCauseName(FailureCause cause) {
  return cohort::InfoOf(static_cast<cohort::FailureCause>(cause)).words;
}

absl::Status Initialize(const Options& options) {
  cohort::InitLogging("libdist");
  absl::StatusOr<ResolvedOptions> resolved = internal::ResolveOptions(options);
  if (!resolved.ok()) return resolved.status();
  {
    absl::MutexLock lock(&g_mu);
    if (g_state) {
      return absl::FailedPreconditionError(
          "dist::Initialize() was already called; call it once per process");
    }
  }
  auto state = std::make_shared<State>();
  state->options = *resolved;
  state->on_peer_failure =
      options.on_peer_failure ? options.on_peer_failure : DefaultPeerFailureHandler;
  std::weak_ptr<State> weak = state;
  absl::StatusOr<std::unique_ptr<Runtime>> runtime =
      Runtime::Start(*resolved, [weak](const JobEvent& e) { HandleEvent(weak, e); });
  if (!runtime.ok()) {
    return absl::Status(
        runtime.status().code(),
        absl::StrCat("process ", resolved->job.process_id, " of ", resolved->job.num_processes,
                     " could not join the job: ", runtime.status().message()));
  }
  state->runtime = std::move(*runtime);
  state->preemption = std::make_unique<PreemptionSync>(state->client(), resolved->job.process_id);
  bool early_notice = false;
  {
    absl::MutexLock lock(&state->mu);
    state->preemption_ready = true;
    early_notice = state->early_notice;
  }
  // Dropping it would leave the other processes waiting for this one in the agreement.
  if (early_notice) state->preemption->OnNotice();
  if (options.install_preemption_handler) {
    state->sigterm = std::make_unique<SigtermWatcher>([weak] {
      if (auto s = weak.lock()) {
        s->client()->ReportPreemption([](absl::Status st) {
          if (!st.ok()) cohort::LogWarning("could not report the preemption: ", st.message());
        });
      }
    });
  }
  {
    absl::MutexLock lock(&g_mu);
    g_state = state;
  }
  cohort::LogInfo("process ", resolved->job.process_id, " of ", resolved->job.num_processes,
                  " joined the job (", resolved->mode == Mode::kAgent ? "agent" : "standalone",
                  " mode",
                  resolved->job.restart_attempt
                      ? absl::StrCat(", restart attempt ", *resolved->job.restart_attempt)
                      : "",
                  ")");
  return absl::OkStatus();
}

bool IsInitialized() { return Current() != nullptr; }

absl::Status Shutdown() {
  std::shared_ptr<State> state;
  {
    absl::MutexLock lock(&g_mu);
    state = std::move(g_state);
    g_state = nullptr;
  }
  if (!state) return NotInitialized();
  std::thread failure_thread;
  {
    absl::MutexLock lock(&state->mu);
    state->shutting_down = true;
    failure_thread = std::move(state->failure_thread);
  }
  if (failure_thread.joinable()) {
    // Shutdown() called from the program's own peer-failure handler runs on that thread.
    if (failure_thread.get_id() == std::this_thread::get_id()) {
      failure_thread.detach();
    } else {
      failure_thread.join();
    }
  }
  state->sigterm.reset();
  absl::Status s = state->runtime->Shutdown();
  state->preemption.reset();
  state->runtime.reset();
  return s;
}

int ProcessIndex() {
  auto s = Current();
  return s ? s->options.job.process_id : 0;
}

int ProcessCount() {
  auto s = Current();
  return s ? s->options.job.num_processes : 1;
}

int LocalProcessIndex() {
  auto s = Current();
  return s ? s->options.job.local_process_id : 0;
}

int LocalProcessCount() {
  auto s = Current();
  return s ? s->options.job.local_process_count : 1;
}

int RestartAttempt() {
  auto s = Current();
  return s && s->options.job.restart_attempt ? *s->options.job.restart_attempt : 0;
}

absl::Status KeyValueSet(absl::string_view key, absl::string_view value, bool allow_overwrite) {
  auto state = Current();
  if (!state) return NotInitialized();
  return Settle(*state, state->store().Set(key, value, allow_overwrite));
}

absl::StatusOr<std::string> KeyValueGet(absl::string_view key, absl::Duration timeout) {
  auto state = Current();
  if (!state) return NotInitialized();
  absl::StatusOr<std::string> v = state->store().Get(key, absl::Now() + timeout);
  if (!v.ok()) return Settle(*state, v.status());
  return v;
}

absl::StatusOr<std::string> KeyValueTryGet(absl::string_view key) {
  auto state = Current();
  if (!state) return NotInitialized();
  absl::StatusOr<std::string> v = state->store().TryGet(key);
  if (!v.ok()) return Settle(*state, v.status());
  return v;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> KeyValueDir(
    absl::string_view directory) {
  auto state = Current();
  if (!state) return NotInitialized();
  absl::StatusOr<cohort::coordination::KeyValueEntries> entries = state->store().Dir(directory);
  if (!entries.ok()) return Settle(*state, entries.status());
  return entries;
}

absl::Status KeyValueDelete(absl::string_view key) {
  auto state = Current();
  if (!state) return NotInitialized();
  return Settle(*state, state->store().Delete(key));
}

absl::StatusOr<int64_t> KeyValueIncrement(absl::string_view key, int64_t increment) {
  auto state = Current();
  if (!state) return NotInitialized();
  absl::StatusOr<int64_t> v = state->store().Add(key, increment);
  if (!v.ok()) return Settle(*state, v.status());
  return v;
}

absl::Status Barrier(absl::string_view id, absl::Duration timeout,
                     const std::vector<int>& process_ids) {
  auto state = Current();
  if (!state) return NotInitialized();
  return Settle(*state, state->store().Barrier(id, timeout, process_ids));
}

absl::Status CancelBarrier(absl::string_view id) {
  auto state = Current();
  if (!state) return NotInitialized();
  return Settle(*state, state->store().CancelBarrier(id));
}

absl::Status SyncGlobalDevices(absl::string_view name, absl::Duration timeout) {
  auto state = Current();
  if (!state) return NotInitialized();
  // One reusable barrier for every name; process 0 publishes its name for the k-th call, and
  // every other process compares after the barrier (a mismatch is named, not a timeout).
  const int64_t k = state->sync_global_devices_calls.fetch_add(1);
  const std::string key = absl::StrCat("sync_global_devices/", k);
  const bool leader = state->options.job.process_id == 0;
  if (leader) {
    if (absl::Status s = KeyValueSet(key, name, /*allow_overwrite=*/true); !s.ok()) return s;
  }
  if (absl::Status s = Barrier("sync_global_devices", timeout); !s.ok()) return s;
  if (leader) {
    // Everyone read call k-1's name before entering this barrier.
    if (k > 0) (void)KeyValueDelete(absl::StrCat("sync_global_devices/", k - 1));
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> expected = KeyValueGet(key, timeout);
  if (!expected.ok()) return expected.status();
  if (*expected != name) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sync_global_devices name mismatch: process ", state->options.job.process_id,
        " called SyncGlobalDevices(\"", name, "\") while process 0 called SyncGlobalDevices(\"",
        *expected, "\"); every process must pass the same name"));
  }
  return absl::OkStatus();
}

namespace {

// A step is sent to the agent when it changed, at most once per this interval: the sidecar and
// the service need the latest step and its time, not every step of a loop that reports hundreds a
// second (at 5 ms steps, 256 ranks on one host could send their sidecars 50,000 calls a second).
// The sidecar divides the time between two reports by the steps between.
constexpr absl::Duration kStepReportInterval = absl::Milliseconds(100);

void SendStep(State& state, int64_t step) {
  absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&state.step_mu);
    if (state.step_sent &&
        (*state.step_sent == step || now - state.step_sent_at < kStepReportInterval))
      return;
    state.step_sent = step;
    state.step_sent_at = now;
  }
  // Best effort: a later step reports again.
  state.client()->ReportStep(step, [](absl::Status) {});
}

}  // namespace

absl::Status ReportProgress(int64_t step) {
  auto state = Current();
  if (!state) return NotInitialized();
  SendStep(*state, step);
  return absl::OkStatus();
}

absl::StatusOr<bool> ReachedPreemptionSyncPoint(int64_t step) {
  auto state = Current();
  if (!state) return false;
  SendStep(*state, step);
  return state->preemption->ReachedSyncPoint(step);
}

absl::Status ReportPreemption() {
  auto state = Current();
  if (!state) return NotInitialized();
  return state->store().ReportPreemption();
}

bool PreemptionNoticeReceived() {
  auto state = Current();
  return state && state->preemption->notice_received();
}

absl::Status ReportError(absl::string_view message) {
  auto state = Current();
  if (!state) return NotInitialized();
  return state->store().ReportError(cohort::coordination::FailureCause::kReportedError, message);
}

namespace internal {

absl::StatusOr<FailureHandlers::Id> AddFailureHandler(std::string name, absl::Duration bound,
                                                      FailureHandlers::Handler handler) {
  auto state = Current();
  if (!state) return NotInitialized();
  return state->failure_handlers.Add(std::move(name), bound, std::move(handler));
}

void RemoveFailureHandler(FailureHandlers::Id id) {
  if (auto state = Current()) state->failure_handlers.Remove(id);
}

absl::StatusOr<JobHandle> CurrentJob() {
  auto state = Current();
  if (!state) return NotInitialized();
  JobHandle job;
  job.client = std::shared_ptr<cohort::coordination::JobClient>(state, state->client());
  job.process_id = state->options.job.process_id;
  job.num_processes = state->options.job.num_processes;
  job.restart_attempt = state->options.job.restart_attempt.value_or(0);
  job.local_process_id = state->options.job.local_process_id;
  job.coordinator_address = state->options.job.coordinator_address;
  job.initialization_timeout = state->options.job.timeouts.initialization;
  job.heartbeat_timeout = state->options.job.timeouts.heartbeat;
  return job;
}

std::optional<PeerFailure> JobFailure() {
  auto state = Current();
  if (!state) return std::nullopt;
  absl::MutexLock lock(&state->mu);
  return state->failure;
}

void AwaitFailureHandled(absl::Duration bound) {
  if (auto state = Current()) state->failure_handled.WaitForNotificationWithTimeout(bound);
}

}  // namespace internal

}  // namespace dist
