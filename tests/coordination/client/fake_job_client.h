#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "coordination/client/job_client.h"
#include "coordination/core/coordination_service.h"

namespace cohort::coordination::testing {

class FakeJob;

// A JobClient for unit tests of what is built on it (libdist's preemption protocol, the
// collectives' store): each process of a FakeJob gets one, and their calls go straight to one
// in-memory CoordinationService, so keys, barriers and failures behave as in a real job, with
// no transport and no threads of its own. Barriers can be held back to look at a caller while
// it waits.
class FakeJobClient final : public JobClient {
 public:
  FakeJobClient(CoordinationService* service, TaskId task, Incarnation incarnation)
      : service_(service), task_(task), incarnation_(incarnation) {}

  // Barrier calls wait here (not yet in the service) until ReleaseBarriers().
  void HoldBarriers() {
    absl::MutexLock lock(&mu_);
    hold_barriers_ = true;
  }
  void ReleaseBarriers() {
    std::vector<std::function<void()>> held;
    {
      absl::MutexLock lock(&mu_);
      hold_barriers_ = false;
      held.swap(held_);
    }
    for (auto& start : held) start();
  }
  // Blocks until `n` barrier calls are held.
  void AwaitHeldBarriers(int n) {
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return static_cast<int>(held_.size()) >= n;
    };
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&enough));
  }

  void InsertKeyValue(std::string key, std::string value, bool allow_overwrite,
                      DoneCallback done) override {
    done(service_->InsertKeyValue(task_, incarnation_, key, std::move(value), allow_overwrite));
  }
  void GetKeyValue(std::string key, absl::Duration timeout, ValueCallback done) override {
    service_->GetKeyValue(task_, incarnation_, key, timeout, std::move(done));
  }
  void TryGetKeyValue(std::string key, ValueCallback done) override {
    done(service_->TryGetKeyValue(task_, incarnation_, key));
  }
  void GetKeyValueDir(std::string directory, EntriesCallback done) override {
    done(service_->GetKeyValueDir(task_, incarnation_, directory));
  }
  void DeleteKeyValue(std::string key, DoneCallback done) override {
    done(service_->DeleteKeyValue(task_, incarnation_, key));
  }
  void IncrementKeyValue(std::string key, int64_t increment, IntCallback done) override {
    done(service_->IncrementKeyValue(task_, incarnation_, key, increment));
  }
  void Barrier(std::string id, absl::Duration timeout, std::vector<TaskId> participants,
               DoneCallback done) override {
    int64_t counter = 0;
    {
      absl::MutexLock lock(&mu_);
      counter = counters_[id]++;
    }
    auto start =
        [this,
         args = BarrierArgs{task_, incarnation_, id, counter, timeout, std::move(participants)},
         done = std::move(done)] { service_->Barrier(args, done); };
    {
      absl::MutexLock lock(&mu_);
      if (hold_barriers_) {
        held_.push_back(std::move(start));
        return;
      }
    }
    start();
  }
  void CancelBarrier(std::string id, DoneCallback done) override {
    int64_t counter = 0;
    {
      absl::MutexLock lock(&mu_);
      counter = counters_[id] - 1;
    }
    done(service_->CancelBarrier(task_, incarnation_, id, counter));
  }
  void ReportPreemption(DoneCallback done) override {
    done(service_->ReportPreemption(task_, incarnation_));
  }
  void ReportError(FailureCause cause, std::string message, DoneCallback done) override {
    done(service_->ReportError(task_, incarnation_, cause, message));
  }
  void ReportStep(int64_t step, DoneCallback done) override {
    done(service_->Heartbeat(task_, incarnation_, nullptr, absl::ZeroDuration(),
                             StepReport{step, absl::ZeroDuration()}));
  }
  // As if the agent's next heartbeat carried it at once.
  void ReportProgress(std::vector<CollectiveProgress> progress, DoneCallback done) override {
    done(service_->Heartbeat(task_, incarnation_, &progress));
  }
  void GetJobProgress(ProgressCallback done) override {
    done(service_->GetJobProgress(task_, incarnation_));
  }
  void Shutdown(DoneCallback done) override {
    service_->ShutdownTask(task_, incarnation_, std::move(done));
  }

 private:
  CoordinationService* const service_;
  const TaskId task_;
  const Incarnation incarnation_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, int64_t> counters_ ABSL_GUARDED_BY(mu_);
  bool hold_barriers_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::function<void()>> held_ ABSL_GUARDED_BY(mu_);
};

// A job of `num_tasks` processes that have all joined: one CoordinationService on a FakeClock,
// one FakeJobClient per process.
class FakeJob {
 public:
  explicit FakeJob(int num_tasks) {
    ServiceConfig config;
    config.num_tasks = num_tasks;
    service_ = std::make_unique<CoordinationService>(config, &clock_);
    for (TaskId t = 0; t < num_tasks; ++t) {
      Incarnation incarnation = 1000 + t;
      service_->RegisterTask(
          RegisterArgs{t, incarnation, num_tasks, "fake-host", 100 + t, {}, {}, {}},
          [](absl::Status) {});
      clients_.push_back(std::make_unique<FakeJobClient>(service_.get(), t, incarnation));
    }
  }

  FakeJobClient& client(TaskId task) { return *clients_.at(task); }
  CoordinationService& service() { return *service_; }
  FakeClock& clock() { return clock_; }

 private:
  FakeClock clock_;
  std::unique_ptr<CoordinationService> service_;
  std::vector<std::unique_ptr<FakeJobClient>> clients_;
};

}  // namespace cohort::coordination::testing
