#include "dist/distributed.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/log.h"
#include "libdist/src/await.h"
#include "libdist/src/options.h"
#include "libdist/src/preemption_sync.h"
#include "libdist/src/runtime.h"

namespace dist {
namespace {

namespace pb = ::cohort::coordination::v1;
using cohort::coordination::JobEvent;
using cohort::coordination::PreemptionNotice;
using cohort::coordination::TaskFailure;
using internal::Await;
using internal::PreemptionSync;
using internal::ResolvedOptions;
using internal::Runtime;
using internal::SigtermWatcher;

FailureCause ToPublic(cohort::coordination::FailureCause cause) {
  using C = cohort::coordination::FailureCause;
  switch (cause) {
    case C::kProcessExited: return FailureCause::kCrash;
    case C::kHeartbeatTimeout: return FailureCause::kHeartbeatTimeout;
    case C::kPreempted: return FailureCause::kPreempted;
    case C::kRestarted: return FailureCause::kRestarted;
    case C::kReportedError: return FailureCause::kReportedError;
    case C::kRegistrationTimeout: return FailureCause::kRegistrationTimeout;
    case C::kShutdownTimeout: return FailureCause::kShutdownTimeout;
    case C::kServiceUnreachable: return FailureCause::kServiceLost;
    case C::kUnspecified: break;
  }
  return FailureCause::kUnknown;
}

void DefaultPeerFailureHandler(const PeerFailure& failure) {
  std::string line = absl::StrCat(
      "cohort: the job failed: ", failure.message, " [cause: ", FailureCauseName(failure.cause),
      "]. Exiting with code ", kPeerFailureExitCode,
      " (fate sharing; set dist::Options::on_peer_failure to handle failures yourself)\n");
  std::fflush(stdout);
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  std::_Exit(kPeerFailureExitCode);
}

// The process's one distributed state. Initialize creates it; Shutdown destroys it.
struct State {
  ResolvedOptions options;
  std::function<void(const PeerFailure&)> on_peer_failure;
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<PreemptionSync> preemption;
  std::unique_ptr<SigtermWatcher> sigterm;
  std::atomic<bool> failed{false};
  absl::Notification failure_handled;  // The peer-failure handler returned.
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
    if (state->preemption) state->preemption->OnNotice();
    return;
  }
  const auto& f = std::get<TaskFailure>(event);
  if (state->failed.exchange(true)) return;
  PeerFailure failure{f.task, ToPublic(f.cause), f.message};
  state->on_peer_failure(failure);
  state->failure_handled.Notify();
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
  switch (cause) {
    case FailureCause::kCrash: return "crash";
    case FailureCause::kHeartbeatTimeout: return "heartbeat timeout";
    case FailureCause::kPreempted: return "preemption";
    case FailureCause::kRestarted: return "restart";
    case FailureCause::kReportedError: return "reported error";
    case FailureCause::kRegistrationTimeout: return "registration timeout";
    case FailureCause::kShutdownTimeout: return "shutdown timeout";
    case FailureCause::kServiceLost: return "coordination service lost";
    case FailureCause::kUnknown: break;
  }
  return "unknown";
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
  state->on_peer_failure = options.on_peer_failure ? options.on_peer_failure
                                                   : DefaultPeerFailureHandler;
  std::weak_ptr<State> weak = state;
  absl::StatusOr<std::unique_ptr<Runtime>> runtime =
      Runtime::Start(*resolved, [weak](const JobEvent& e) { HandleEvent(weak, e); });
  if (!runtime.ok()) {
    return absl::Status(runtime.status().code(),
                        absl::StrCat("process ", resolved->process_id, " of ",
                                     resolved->num_processes, " could not join the job: ",
                                     runtime.status().message()));
  }
  state->runtime = std::move(*runtime);
  state->preemption =
      std::make_unique<PreemptionSync>(state->runtime->control(), resolved->process_id);
  if (options.install_preemption_handler) {
    state->sigterm = std::make_unique<SigtermWatcher>([weak] {
      if (auto s = weak.lock()) {
        s->runtime->control()->ReportPreemption(
            [](absl::Status st, const pb::ReportPreemptionResponse&) {
              if (!st.ok()) cohort::LogWarning("could not report the preemption: ", st.message());
            });
      }
    });
  }
  {
    absl::MutexLock lock(&g_mu);
    g_state = state;
  }
  cohort::LogInfo("process ", resolved->process_id, " of ", resolved->num_processes,
                  " joined the job (", resolved->mode == Mode::kAgent ? "agent" : "standalone",
                  " mode)");
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
  state->sigterm.reset();
  absl::Status s = state->runtime->Shutdown();
  state->preemption.reset();
  state->runtime.reset();
  return s;
}

int ProcessIndex() {
  auto s = Current();
  return s ? s->options.process_id : 0;
}

int ProcessCount() {
  auto s = Current();
  return s ? s->options.num_processes : 1;
}

absl::Status KeyValueSet(absl::string_view key, absl::string_view value, bool allow_overwrite) {
  auto state = Current();
  if (!state) return NotInitialized();
  pb::InsertKeyValueRequest req;
  req.mutable_kv()->set_key(std::string(key));
  req.mutable_kv()->set_value(std::string(value));
  req.set_allow_overwrite(allow_overwrite);
  return Settle(*state, Await<pb::InsertKeyValueResponse>([&](auto cb) {
                         state->runtime->control()->InsertKeyValue(req, std::move(cb));
                       }).first);
}

absl::StatusOr<std::string> KeyValueGet(absl::string_view key, absl::Duration timeout) {
  auto state = Current();
  if (!state) return NotInitialized();
  pb::GetKeyValueRequest req;
  req.set_key(std::string(key));
  req.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  auto [s, resp] = Await<pb::GetKeyValueResponse>(
      [&](auto cb) { state->runtime->control()->GetKeyValue(req, std::move(cb)); });
  if (!s.ok()) return Settle(*state, s);
  return resp.kv().value();
}

absl::StatusOr<std::string> KeyValueTryGet(absl::string_view key) {
  auto state = Current();
  if (!state) return NotInitialized();
  pb::TryGetKeyValueRequest req;
  req.set_key(std::string(key));
  auto [s, resp] = Await<pb::TryGetKeyValueResponse>(
      [&](auto cb) { state->runtime->control()->TryGetKeyValue(req, std::move(cb)); });
  if (!s.ok()) return Settle(*state, s);
  return resp.kv().value();
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> KeyValueDir(
    absl::string_view directory) {
  auto state = Current();
  if (!state) return NotInitialized();
  pb::GetKeyValueDirRequest req;
  req.set_directory(std::string(directory));
  auto [s, resp] = Await<pb::GetKeyValueDirResponse>(
      [&](auto cb) { state->runtime->control()->GetKeyValueDir(req, std::move(cb)); });
  if (!s.ok()) return Settle(*state, s);
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(resp.kvs_size());
  for (const auto& kv : resp.kvs()) out.emplace_back(kv.key(), kv.value());
  return out;
}

absl::Status KeyValueDelete(absl::string_view key) {
  auto state = Current();
  if (!state) return NotInitialized();
  pb::DeleteKeyValueRequest req;
  req.set_key(std::string(key));
  return Settle(*state, Await<pb::DeleteKeyValueResponse>([&](auto cb) {
                         state->runtime->control()->DeleteKeyValue(req, std::move(cb));
                       }).first);
}

absl::StatusOr<int64_t> KeyValueIncrement(absl::string_view key, int64_t increment) {
  auto state = Current();
  if (!state) return NotInitialized();
  pb::IncrementKeyValueRequest req;
  req.set_key(std::string(key));
  req.set_increment(increment);
  auto [s, resp] = Await<pb::IncrementKeyValueResponse>(
      [&](auto cb) { state->runtime->control()->IncrementKeyValue(req, std::move(cb)); });
  if (!s.ok()) return Settle(*state, s);
  return resp.value();
}

absl::Status Barrier(absl::string_view id, absl::Duration timeout,
                     const std::vector<int>& process_ids) {
  auto state = Current();
  if (!state) return NotInitialized();
  pb::BarrierRequest req;
  req.set_barrier_id(std::string(id));
  req.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  for (int p : process_ids) req.add_task_ids(p);
  return Settle(*state, Await<pb::BarrierResponse>([&](auto cb) {
                         state->runtime->control()->Barrier(req, std::move(cb));
                       }).first);
}

absl::Status CancelBarrier(absl::string_view id) {
  auto state = Current();
  if (!state) return NotInitialized();
  pb::CancelBarrierRequest req;
  req.set_barrier_id(std::string(id));
  return Settle(*state, Await<pb::CancelBarrierResponse>([&](auto cb) {
                         state->runtime->control()->CancelBarrier(req, std::move(cb));
                       }).first);
}

absl::Status SyncGlobalDevices(absl::string_view name, absl::Duration timeout) {
  return Barrier(absl::StrCat("sync_global_devices/", name), timeout);
}

absl::StatusOr<bool> ReachedPreemptionSyncPoint(int64_t step) {
  auto state = Current();
  if (!state) return false;
  return state->preemption->ReachedSyncPoint(step);
}

absl::Status ReportPreemption() {
  auto state = Current();
  if (!state) return NotInitialized();
  return Await<pb::ReportPreemptionResponse>(
             [&](auto cb) { state->runtime->control()->ReportPreemption(std::move(cb)); })
      .first;
}

bool PreemptionNoticeReceived() {
  auto state = Current();
  return state && state->preemption->notice_received();
}

absl::Status ReportError(absl::string_view message) {
  auto state = Current();
  if (!state) return NotInitialized();
  return Await<pb::ReportErrorResponse>([&](auto cb) {
           state->runtime->control()->ReportError(cohort::coordination::FailureCause::kReportedError,
                                                  std::string(message), std::move(cb));
         })
      .first;
}

}  // namespace dist
