// Fuzz target: arbitrary sequences of protocol calls against one CoordinationService, made through
// CoordinationRpcHandler (the handler behind every transport), on a FakeClock.
//
// The input is a script, one call per line (corpus/coordination_service/ has examples):
//
//   job N [heartbeat_ms] [register_ms] [shutdown_ms] [attempt]   first line only; default 3 tasks
//   register T [num_tasks] [attempt]   heartbeat T [progress_age_ms]   watch T   progress T
//   set T key value [overwrite]        get T key timeout_ms                tryget T key
//   dir T directory                    delete T key                        incr T key delta
//   barrier T id counter timeout_ms [p,p,...]   cancelbarrier T id counter
//   error T cause message              preempt T                           shutdown T
//   cancel K       the caller of the K-th waiting call (mod their number) went away
//   advance ms     the clock moves, then the deadlines fire            check: the deadlines fire
//
// T is a task id, with an optional incarnation: "1@42" (default 1000 + T). A value "x*N" is N
// copies of "x", to reach the size limits.
//
// Invariants (docs/protocol.md), checked after every call:
//  - every waiting call completes exactly once (by the end, when the service is destroyed), never
//    under the service's lock, with a status code from the documented set and a message;
//  - a task moves only along the lifecycle in coordination_service.h; FAILED and SHUT_DOWN are
//    final; a failed job stays failed with the same message; after the failure no call succeeds
//    that the failure must abort, nothing still waits (registrations, barriers, gets, shutdown),
//    and every watcher was told exactly once;
//  - the key-value store agrees with a model kept here (an independent map with the documented
//    normalization, limits and overwrite rule): reads return what was written, directories list
//    exactly the entries below them, increments add, and the snapshot's counts agree;
//  - a barrier succeeds only when every participant called it with that counter;
//  - calls for a task outside 0..N-1 fail with INVALID_ARGUMENT.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/log.h"
#include "coordination/core/coordination_service.h"
#include "coordination/server/rpc_handler.h"
#include "tests/fuzz/fuzz_util.h"

namespace cohort::coordination {
namespace {

using fuzz::Int;
using fuzz::Word;
using fuzz::Words;

constexpr int kMaxTasks = 8;
constexpr size_t kMaxLines = 300;
constexpr size_t kMaxKeyBytes = 4 << 10;    // docs/protocol.md
constexpr size_t kMaxValueBytes = 1 << 20;  // docs/protocol.md
constexpr int64_t kMaxAdvanceMs = 24 * 3600 * 1000;

// The documented normalization, written independently of KeyValueStore::NormalizeKey: leading and
// trailing '/' removed, runs of '/' collapsed.
std::string Normalize(const std::string& key) {
  std::vector<std::string> parts = absl::StrSplit(key, '/', absl::SkipEmpty());
  return absl::StrJoin(parts, "/");
}

struct TaskRef {
  TaskId task = 0;
  Incarnation incarnation = 0;
};

TaskRef ParseTask(const std::string& word) {
  TaskRef ref;
  std::pair<std::string, std::string> parts = absl::StrSplit(word, absl::MaxSplits('@', 1));
  if (!absl::SimpleAtoi(parts.first, &ref.task)) ref.task = 0;
  ref.incarnation = static_cast<Incarnation>(1000 + static_cast<int64_t>(ref.task));
  uint64_t inc;
  if (!parts.second.empty() && absl::SimpleAtoi(parts.second, &inc)) ref.incarnation = inc;
  return ref;
}

bool DocumentedCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnavailable:
      return true;
    default:
      return false;
  }
}

bool AllowedTransition(TaskState from, TaskState to) {
  if (from == to) return true;
  switch (from) {
    case TaskState::kDisconnected:
      // One call can take the last task straight to CONNECTED (it completes the connect barrier).
      return to == TaskState::kConnecting || to == TaskState::kConnected ||
             to == TaskState::kFailed;
    case TaskState::kConnecting:
      return to == TaskState::kConnected || to == TaskState::kFailed ||
             to == TaskState::kDisconnected;  // Its registration was withdrawn.
    case TaskState::kConnected:
      return to == TaskState::kShutDown || to == TaskState::kFailed;
    case TaskState::kFailed:
    case TaskState::kShutDown:
      return false;
  }
  return false;
}

// One waiting call (registration, barrier, blocking get, shutdown) and how it completed.
struct Waiting {
  std::string what;
  int completions = 0;
  absl::Status status;
  bool is_barrier = false;
  std::string barrier_id;
  int64_t counter = 0;
  std::vector<TaskId> participants;  // Sorted, unique; empty: every task.
  bool is_get = false;
  std::string key;                   // Normalized.
  std::optional<std::string> value;  // A blocking get's value.
};

struct Watcher {
  OpId op = 0;
  bool cancelled = false;
  int failures = 0;
  int preemptions = 0;
  std::string failure_message;
};

class Harness {
 public:
  explicit Harness(const ServiceConfig& config)
      : n_(config.num_tasks),
        service_(std::make_unique<CoordinationService>(config, &clock_)),
        handler_(std::make_unique<CoordinationRpcHandler>(service_.get(), ReplyBudget::Create())) {
    previous_ = service_->GetSnapshot();
  }

  // Destroys the service (which fails every waiting call), then checks that each completed once.
  void Finish() {
    destroying_ = true;
    service_.reset();
    for (const auto& w : waiting_) {
      FUZZ_CHECK(w->completions == 1, w->what, " completed ", w->completions,
                 " times by the end (the service's destructor fails what still waits)");
    }
  }

  void Run(const Words& w) {
    const std::string& op = w[0];
    fired_.clear();
    const bool failed_before = previous_.job_failed;
    TaskRef t = ParseTask(Word(w, 1, "0"));
    const bool in_range = t.task >= 0 && t.task < n_;
    // Immediate results whose caller must be validated first: out of range is INVALID_ARGUMENT,
    // and after the job failed every such call is ABORTED.
    auto expect_validated = [&](const absl::Status& s, const std::string& what) {
      Check(s, what);
      if (!in_range) {
        FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument, what,
                   " for a task out of range: ", s.ToString());
      } else if (failed_before) {
        FUZZ_CHECK(s.code() == absl::StatusCode::kAborted, what,
                   " after the job failed: ", s.ToString());
      }
    };

    if (op == "register") {
      pb::RegisterTaskRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      req.set_num_tasks(static_cast<int32_t>(Int(w, 2, n_)));
      req.set_hostname("host");
      req.set_pid(100 + t.task);
      if (w.size() > 3) req.set_restart_attempt(static_cast<int32_t>(Int(w, 3, 0)));
      auto waiting = NewWaiting("register " + Word(w, 1));
      auto resp = std::make_shared<pb::RegisterTaskResponse>();
      Track(waiting, handler_->RegisterTaskAsync(&req, resp.get(), Callback(waiting, resp)));
    } else if (op == "heartbeat") {
      pb::HeartbeatRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      if (w.size() > 2) {
        req.set_progress_age_ms(Int(w, 2, 0));
        pb::CollectiveProgress* p = req.add_progress();
        p->set_communicator("world");
        p->set_last_started(3);
        p->set_last_completed(2);
        p->set_pending("all_reduce #3");
      }
      pb::HeartbeatResponse resp;
      absl::Status s;
      handler_->HeartbeatAsync(&req, &resp, [&](absl::Status st) { s = st; });
      Check(s, "heartbeat");
      if (!in_range)
        FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument,
                   "heartbeat out of range: ", s.ToString());
      if (in_range && failed_before)
        FUZZ_CHECK(absl::IsAborted(s), "heartbeat after the job failed: ", s.ToString());
    } else if (op == "watch") {
      pb::WatchJobRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      auto watcher = std::make_shared<Watcher>();
      absl::StatusOr<OpId> id = handler_->WatchJob(&req, [this, watcher](const pb::JobEvent& e) {
        Reenter();
        if (e.has_task_failure()) {
          ++watcher->failures;
          watcher->failure_message = e.task_failure().message();
        } else if (e.has_preemption()) {
          ++watcher->preemptions;
        } else {
          FUZZ_CHECK(false, "a job event with neither a failure nor a preemption");
        }
      });
      Check(id.status(), "watch");
      if (id.ok()) {
        watcher->op = *id;
        watchers_.push_back(watcher);
        ops_.push_back({*id, nullptr, watcher});
      }
    } else if (op == "progress") {
      pb::GetJobProgressRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      pb::GetJobProgressResponse resp;
      absl::Status s;
      handler_->GetJobProgressAsync(&req, &resp, [&](absl::Status st) { s = st; });
      Check(s, "progress");
      if (s.ok()) {
        FUZZ_CHECK(resp.tasks_size() == n_, "GetJobProgress lists ", resp.tasks_size(), " of ", n_,
                   " tasks");
        for (int i = 0; i < resp.tasks_size(); ++i) {
          FUZZ_CHECK(resp.tasks(i).task_id() == i, "GetJobProgress entry ", i, " is task ",
                     resp.tasks(i).task_id());
        }
      }
    } else if (op == "set") {
      std::string key = Word(w, 2);
      std::string value = fuzz::ExpandValue(Word(w, 3), kMaxValueBytes + 8);
      bool overwrite = Int(w, 4, 0) != 0;
      pb::InsertKeyValueRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      req.mutable_kv()->set_key(key);
      req.mutable_kv()->set_value(value);
      req.set_allow_overwrite(overwrite);
      pb::InsertKeyValueResponse resp;
      absl::Status s;
      handler_->InsertKeyValueAsync(&req, &resp, [&](absl::Status st) { s = st; });
      expect_validated(s, "set");
      std::string k = Normalize(key);
      bool exists = kv_.contains(k);
      bool valid = !k.empty() && k.size() <= kMaxKeyBytes && value.size() <= kMaxValueBytes;
      if (s.ok()) {
        FUZZ_CHECK(valid && (!exists || overwrite), "set '", k, "' (", value.size(),
                   " bytes, overwrite=", overwrite, ", exists=", exists, ") succeeded");
        kv_[k] = value;
      } else if (absl::IsAlreadyExists(s)) {
        FUZZ_CHECK(exists && !overwrite, "set '", k,
                   "': ALREADY_EXISTS but the model says exists=", exists);
      } else if (in_range && absl::IsInvalidArgument(s)) {
        FUZZ_CHECK(!valid, "set '", k, "' (", value.size(), " bytes) refused: ", s.ToString());
      }
    } else if (op == "get") {
      std::string key = Word(w, 2);
      pb::GetKeyValueRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      req.set_key(key);
      req.set_timeout_ms(Int(w, 3, 0));
      auto waiting = NewWaiting("get " + Word(w, 1) + " '" + key + "'");
      waiting->is_get = true;
      waiting->key = Normalize(key);
      auto resp = std::make_shared<pb::GetKeyValueResponse>();
      OpId id = handler_->GetKeyValueAsync(&req, resp.get(), Callback(waiting, resp));
      Track(waiting, id);
      if (waiting->completions == 1 && waiting->status.ok()) {
        FUZZ_CHECK(resp->kv().key() == key, "get answered for key '", resp->kv().key(),
                   "', asked '", key, "'");
      }
      if (id != 0) {
        FUZZ_CHECK(!kv_.contains(waiting->key), "get of '", waiting->key,
                   "' waits but the key is set");
      }
    } else if (op == "tryget") {
      std::string key = Word(w, 2);
      pb::TryGetKeyValueRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      req.set_key(key);
      pb::TryGetKeyValueResponse resp;
      absl::Status s;
      handler_->TryGetKeyValueAsync(&req, &resp, [&](absl::Status st) { s = st; });
      expect_validated(s, "tryget");
      auto it = kv_.find(Normalize(key));
      if (s.ok()) {
        FUZZ_CHECK(it != kv_.end(), "tryget '", key, "' found a value the model does not have");
        FUZZ_CHECK(resp.kv().value() == it->second, "tryget '", key, "' read ",
                   resp.kv().value().size(), " bytes, the model holds ", it->second.size());
      } else if (absl::IsNotFound(s)) {
        FUZZ_CHECK(it == kv_.end(), "tryget '", key, "': NOT_FOUND but the model holds it");
      }
    } else if (op == "dir") {
      std::string dir = Word(w, 2);
      pb::GetKeyValueDirRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      req.set_directory(dir);
      auto resp = std::make_shared<pb::GetKeyValueDirResponse>();
      std::optional<absl::Status> s;
      handler_->GetKeyValueDirAsync(&req, resp.get(),
                                    [&s](absl::Status st, ReplyBudget::Charge) { s = st; });
      FUZZ_CHECK(s.has_value(),
                 "a directory read waits for the reply budget with nothing in flight");
      expect_validated(*s, "dir");
      if (s->ok()) {
        std::string prefix = Normalize(dir);
        if (!prefix.empty()) prefix += "/";
        std::vector<std::pair<std::string, std::string>> expected;
        for (const auto& [k, v] : kv_) {
          if (k.compare(0, prefix.size(), prefix) == 0) expected.emplace_back(k, v);
        }
        FUZZ_CHECK(static_cast<size_t>(resp->kvs_size()) == expected.size(), "dir '", dir,
                   "' listed ", resp->kvs_size(), " entries, the model has ", expected.size());
        for (size_t i = 0; i < expected.size(); ++i) {
          FUZZ_CHECK(
              resp->kvs(i).key() == expected[i].first && resp->kvs(i).value() == expected[i].second,
              "dir '", dir, "' entry ", i, " is '", resp->kvs(i).key(), "', expected '",
              expected[i].first, "'");
        }
      }
    } else if (op == "delete") {
      std::string key = Word(w, 2);
      pb::DeleteKeyValueRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      req.set_key(key);
      pb::DeleteKeyValueResponse resp;
      absl::Status s;
      handler_->DeleteKeyValueAsync(&req, &resp, [&](absl::Status st) { s = st; });
      expect_validated(s, "delete");
      std::string k = Normalize(key);
      if (s.ok() && !k.empty()) {
        kv_.erase(k);
        std::string prefix = k + "/";
        for (auto it = kv_.lower_bound(prefix);
             it != kv_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
          it = kv_.erase(it);
        }
      }
    } else if (op == "incr") {
      std::string key = Word(w, 2);
      int64_t delta = Int(w, 3, 1);
      pb::IncrementKeyValueRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      req.set_key(key);
      req.set_increment(delta);
      pb::IncrementKeyValueResponse resp;
      absl::Status s;
      handler_->IncrementKeyValueAsync(&req, &resp, [&](absl::Status st) { s = st; });
      expect_validated(s, "incr");
      std::string k = Normalize(key);
      int64_t old = 0;
      bool integer = true;
      if (auto it = kv_.find(k); it != kv_.end()) integer = absl::SimpleAtoi(it->second, &old);
      int64_t sum;
      bool overflow = __builtin_add_overflow(old, delta, &sum);
      if (s.ok()) {
        FUZZ_CHECK(!k.empty() && k.size() <= kMaxKeyBytes && integer, "incr '", k, "' succeeded");
        FUZZ_CHECK(!overflow, "incr '", k, "': ", old, " + ", delta,
                   " overflows but succeeded with ", resp.value());
        FUZZ_CHECK(resp.value() == sum, "incr '", k, "': ", old, " + ", delta, " gave ",
                   resp.value());
        kv_[k] = absl::StrCat(sum);
      }
    } else if (op == "barrier") {
      pb::BarrierRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      req.set_barrier_id(Word(w, 2));
      req.set_counter(Int(w, 3, 0));
      req.set_timeout_ms(Int(w, 4, 1000));
      std::vector<TaskId> participants;
      if (w.size() > 5) {
        for (absl::string_view p : absl::StrSplit(w[5], ',', absl::SkipEmpty())) {
          int32_t id;
          if (absl::SimpleAtoi(p, &id)) {
            req.add_task_ids(id);
            participants.push_back(id);
          }
        }
      }
      std::sort(participants.begin(), participants.end());
      participants.erase(std::unique(participants.begin(), participants.end()), participants.end());
      if (static_cast<int>(participants.size()) == n_) participants.clear();
      called_[{req.barrier_id(), req.counter()}].insert(t.task);
      auto waiting = NewWaiting(
          absl::StrCat("barrier ", Word(w, 1), " '", req.barrier_id(), "' #", req.counter()));
      waiting->is_barrier = true;
      waiting->barrier_id = req.barrier_id();
      waiting->counter = req.counter();
      waiting->participants = participants;
      auto resp = std::make_shared<pb::BarrierResponse>();
      Track(waiting, handler_->BarrierAsync(&req, resp.get(), Callback(waiting, resp)));
      if (!in_range) {
        FUZZ_CHECK(waiting->completions == 1 && absl::IsInvalidArgument(waiting->status),
                   "barrier for a task out of range: ", waiting->status.ToString());
      }
    } else if (op == "cancelbarrier") {
      pb::CancelBarrierRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      req.set_barrier_id(Word(w, 2));
      req.set_counter(Int(w, 3, 0));
      pb::CancelBarrierResponse resp;
      absl::Status s;
      handler_->CancelBarrierAsync(&req, &resp, [&](absl::Status st) { s = st; });
      expect_validated(s, "cancelbarrier");
    } else if (op == "error") {
      pb::ReportErrorRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      req.set_cause(static_cast<pb::FailureCause>(Int(w, 2, 5)));
      req.set_message(Word(w, 3, "boom"));
      pb::ReportErrorResponse resp;
      absl::Status s;
      handler_->ReportErrorAsync(&req, &resp, [&](absl::Status st) { s = st; });
      Check(s, "error");
      if (!in_range) FUZZ_CHECK(absl::IsInvalidArgument(s), "error out of range: ", s.ToString());
    } else if (op == "preempt") {
      pb::ReportPreemptionRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      pb::ReportPreemptionResponse resp;
      absl::Status s;
      handler_->ReportPreemptionAsync(&req, &resp, [&](absl::Status st) { s = st; });
      expect_validated(s, "preempt");
    } else if (op == "shutdown") {
      pb::ShutdownTaskRequest req;
      req.set_task_id(t.task);
      req.set_incarnation(t.incarnation);
      auto waiting = NewWaiting("shutdown " + Word(w, 1));
      auto resp = std::make_shared<pb::ShutdownTaskResponse>();
      Track(waiting, handler_->ShutdownTaskAsync(&req, resp.get(), Callback(waiting, resp)));
    } else if (op == "cancel") {
      if (!ops_.empty()) {
        const OpEntry& entry = ops_[static_cast<uint64_t>(Int(w, 1, 0)) % ops_.size()];
        handler_->CancelOp(entry.op);
        if (entry.waiting != nullptr) {
          FUZZ_CHECK(entry.waiting->completions == 1, entry.waiting->what,
                     " is still waiting after its caller went away");
        }
        if (entry.watcher != nullptr) entry.watcher->cancelled = true;
      }
    } else if (op == "advance") {
      clock_.Advance(absl::Milliseconds(std::clamp<int64_t>(Int(w, 1, 0), 0, kMaxAdvanceMs)));
      service_->CheckDeadlines();
    } else if (op == "check") {
      service_->CheckDeadlines();
    }
    AfterStep(failed_before);
  }

 private:
  struct OpEntry {
    OpId op;
    std::shared_ptr<Waiting> waiting;
    std::shared_ptr<Watcher> watcher;
  };

  std::shared_ptr<Waiting> NewWaiting(std::string what) {
    auto w = std::make_shared<Waiting>();
    w->what = std::move(what);
    waiting_.push_back(w);
    return w;
  }

  void Track(const std::shared_ptr<Waiting>& w, OpId id) {
    if (id != 0) ops_.push_back({id, w, nullptr});
  }

  // A user callback may call the service: it never runs under the service's lock (with Abseil's
  // deadlock detection this aborts, without it the fuzzer's timeout catches the hang).
  void Reenter() {
    if (!destroying_) (void)service_->JobStatus();
  }

  template <typename Response>
  std::function<void(absl::Status)> Callback(std::shared_ptr<Waiting> w,
                                             std::shared_ptr<Response> resp) {
    return [this, w, resp](absl::Status s) {
      FUZZ_CHECK(w->completions == 0, w->what, " completed twice: ", w->status.ToString(),
                 ", then ", s.ToString());
      ++w->completions;
      w->status = s;
      if constexpr (std::is_same_v<Response, pb::GetKeyValueResponse>) {
        if (s.ok()) w->value = resp->kv().value();
      }
      Reenter();
      fired_.push_back(w);
    };
  }

  void Check(const absl::Status& s, const std::string& what) {
    FUZZ_CHECK(DocumentedCode(s.code()), what, " returned an undocumented code: ", s.ToString());
    FUZZ_CHECK(s.ok() || !s.message().empty(), what, " failed without a message: ", s.ToString());
  }

  void AfterStep(bool failed_before) {
    CoordinationService::Snapshot now = service_->GetSnapshot();
    // Completions of this step.
    for (const auto& w : fired_) {
      Check(w->status, w->what);
      if (failed_before) {
        FUZZ_CHECK(!w->status.ok(), w->what, " succeeded after the job failed");
      }
      if (w->is_get && w->status.ok()) {
        auto it = kv_.find(w->key);
        FUZZ_CHECK(w->value.has_value(), w->what, " succeeded without a value");
        FUZZ_CHECK(it != kv_.end() && it->second == *w->value, w->what, " read ", w->value->size(),
                   " bytes that the model does not hold");
      }
      if (w->is_barrier && w->status.ok()) {
        const std::set<TaskId>& called = called_[{w->barrier_id, w->counter}];
        std::vector<TaskId> everyone;
        if (w->participants.empty()) {
          for (TaskId i = 0; i < n_; ++i) everyone.push_back(i);
        }
        for (TaskId p : w->participants.empty() ? everyone : w->participants) {
          FUZZ_CHECK(called.contains(p), w->what, " passed but participant ", p,
                     " never called it");
        }
      }
    }
    // The task lifecycle.
    FUZZ_CHECK(now.tasks.size() == static_cast<size_t>(n_), "snapshot lists ", now.tasks.size(),
               " tasks");
    for (int i = 0; i < n_; ++i) {
      FUZZ_CHECK(AllowedTransition(previous_.tasks[i].state, now.tasks[i].state), "task ", i,
                 " went from ", TaskStateName(previous_.tasks[i].state), " to ",
                 TaskStateName(now.tasks[i].state));
    }
    // Fate sharing.
    absl::Status job = service_->JobStatus();
    FUZZ_CHECK(now.job_failed == !job.ok(), "snapshot and JobStatus disagree: ", job.ToString());
    if (previous_.job_failed) {
      FUZZ_CHECK(now.job_failed, "a failed job is no longer failed");
      FUZZ_CHECK(job == job_status_, "the job's failure changed from '", job_status_.message(),
                 "' to '", job.message(), "'");
    }
    job_status_ = job;
    if (now.job_failed) {
      FUZZ_CHECK(absl::IsAborted(job), "a failed job's status is ", job.ToString());
      for (const auto& w : waiting_) {
        FUZZ_CHECK(w->completions == 1, w->what, " still waits after the job failed");
      }
      FUZZ_CHECK(now.kv_waiters == 0 && now.barriers_in_progress == 0, "after the job failed ",
                 now.kv_waiters, " gets and ", now.barriers_in_progress, " barriers still wait");
    }
    FUZZ_CHECK(now.preemption_notices >= previous_.preemption_notices,
               "a preemption notice was forgotten");
    for (const auto& watcher : watchers_) {
      FUZZ_CHECK(watcher->failures <= 1 && watcher->preemptions <= 1, "a watcher was told ",
                 watcher->failures, " failures and ", watcher->preemptions, " preemptions");
      if (watcher->cancelled) continue;
      if (now.job_failed) {
        FUZZ_CHECK(watcher->failures == 1, "a watcher was not told of the job's failure");
        FUZZ_CHECK(watcher->failure_message == job.message(), "a watcher was told '",
                   watcher->failure_message, "', the job failed with '", job.message(), "'");
      }
      if (now.preemption_notices > 0) {
        FUZZ_CHECK(watcher->preemptions == 1, "a watcher was not told of the preemption notice");
      }
    }
    // The key-value store.
    FUZZ_CHECK(now.kv_entries == kv_.size(), "the store holds ", now.kv_entries,
               " entries, the model ", kv_.size());
    size_t gets_waiting = 0;
    std::set<std::string> barriers_waiting;
    for (const auto& w : waiting_) {
      if (w->completions != 0) continue;
      if (w->is_get) ++gets_waiting;
      if (w->is_barrier) barriers_waiting.insert(w->barrier_id);
    }
    FUZZ_CHECK(now.kv_waiters == gets_waiting, "the store has ", now.kv_waiters, " blocking gets, ",
               gets_waiting, " are waiting");
    FUZZ_CHECK(now.barriers_in_progress >= barriers_waiting.size(), now.barriers_in_progress,
               " barriers in progress but calls wait in ", barriers_waiting.size());
    previous_ = std::move(now);
  }

  const int n_;
  FakeClock clock_;
  std::unique_ptr<CoordinationService> service_;
  std::unique_ptr<CoordinationRpcHandler> handler_;
  CoordinationService::Snapshot previous_;
  absl::Status job_status_;
  bool destroying_ = false;

  std::map<std::string, std::string> kv_;  // The model.
  std::vector<std::shared_ptr<Waiting>> waiting_;
  std::vector<std::shared_ptr<Waiting>> fired_;
  std::vector<std::shared_ptr<Watcher>> watchers_;
  std::vector<OpEntry> ops_;
  std::map<std::pair<std::string, int64_t>, std::set<TaskId>> called_;
};

}  // namespace
}  // namespace cohort::coordination

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cohort::SetLogLevel(cohort::LogLevel::kNone);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort::coordination;
  std::vector<cohort::fuzz::Words> script = cohort::fuzz::ParseScript(
      absl::string_view(reinterpret_cast<const char*>(data), size), kMaxLines);
  ServiceConfig config;
  config.num_tasks = 3;
  size_t first = 0;
  if (!script.empty() && script[0][0] == "job") {
    const cohort::fuzz::Words& w = script[0];
    config.num_tasks =
        static_cast<int32_t>(std::clamp<int64_t>(cohort::fuzz::Int(w, 1, 3), 1, kMaxTasks));
    config.heartbeat_timeout =
        absl::Milliseconds(std::clamp<int64_t>(cohort::fuzz::Int(w, 2, 10'000), 1, kMaxAdvanceMs));
    config.register_timeout =
        absl::Milliseconds(std::clamp<int64_t>(cohort::fuzz::Int(w, 3, 300'000), 1, kMaxAdvanceMs));
    config.shutdown_timeout =
        absl::Milliseconds(std::clamp<int64_t>(cohort::fuzz::Int(w, 4, 300'000), 1, kMaxAdvanceMs));
    if (w.size() > 5) config.restart_attempt = static_cast<int32_t>(cohort::fuzz::Int(w, 5, 0));
    first = 1;
  }
  Harness harness(config);
  for (size_t i = first; i < script.size(); ++i) harness.Run(script[i]);
  harness.Finish();
  return 0;
}
