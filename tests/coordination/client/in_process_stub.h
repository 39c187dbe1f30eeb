#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "coordination/client/coordination_stub.h"
#include "coordination/server/rpc_handler.h"

namespace cohort::coordination::testing {

// A CoordinationStub with the service's real handler right behind it, in process: the Agent's
// unit tests run the whole protocol without gRPC or sockets, on a FakeClock. Faults are injected
// here: failing heartbeats (a dropped connection), an unreachable service, a different service
// incarnation (a restarted service), and calls held back until the test releases them (a slow
// transport that even ignores cancellation).
class InProcessStub final : public CoordinationStub {
 public:
  explicit InProcessStub(CoordinationRpcHandler* handler) : handler_(handler) {}

  // Every RegisterTask fails with `status` (e.g. Unavailable: nothing listens) until cleared.
  void FailRegistrations(std::optional<absl::Status> status) {
    absl::MutexLock lock(&mu_);
    fail_registrations_ = std::move(status);
  }
  // Every Heartbeat fails with `status` until cleared.
  void FailHeartbeats(std::optional<absl::Status> status) {
    absl::MutexLock lock(&mu_);
    fail_heartbeats_ = std::move(status);
  }
  // The service is replaced at the same address, as rank 0's sidecar replaces it for a restart
  // attempt: the next registration is answered by the current service; then `refusals`
  // registrations, and every heartbeat meanwhile, are refused (a connection having been open,
  // ServiceReached() stays true); after them `next` answers every call.
  void ReplaceService(CoordinationRpcHandler* next, int refusals) {
    absl::MutexLock lock(&mu_);
    replacement_ = next;
    refusals_ = refusals;
    replacing_ = false;
  }
  // Heartbeats report this service incarnation instead of the real one.
  void ReportServiceIncarnation(Incarnation incarnation) {
    absl::MutexLock lock(&mu_);
    fake_incarnation_ = incarnation;
  }
  // ShutdownTask calls are held (not even CancelAll completes them) until ReleaseHeld().
  void HoldShutdowns() {
    absl::MutexLock lock(&mu_);
    hold_shutdowns_ = true;
  }
  // Completes every held call with `status`.
  void ReleaseHeld(const absl::Status& status) {
    std::vector<StatusCallback> held;
    {
      absl::MutexLock lock(&mu_);
      held.swap(held_);
      hold_shutdowns_ = false;
    }
    for (auto& done : held) done(status);
  }
  int held() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(held_.size());
  }
  // Notified at the first CancelAll().
  const absl::Notification& cancelled() const { return cancelled_; }
  // Notified once a registration waits in the service.
  const absl::Notification& registration_started() const { return registration_started_; }
  int heartbeats() const {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }

  void RegisterTask(const pb::RegisterTaskRequest& request, pb::RegisterTaskResponse* response,
                    absl::Duration, StatusCallback done) override {
    std::optional<absl::Status> fail;
    {
      absl::MutexLock lock(&mu_);
      fail = fail_registrations_;
      if (replacement_ != nullptr && !replacing_) {
        replacing_ = true;  // This one still reaches the current service.
      } else if (replacement_ != nullptr && refusals_ > 0) {
        --refusals_;
        fail = absl::UnavailableError("Connection refused");
      } else if (replacement_ != nullptr) {
        handler_ = replacement_;
        replacement_ = nullptr;
      }
    }
    if (fail) return done(*fail);
    OpId op = handler_.load()->RegisterTaskAsync(&request, response, std::move(done));
    absl::MutexLock lock(&mu_);
    if (op != 0) waiting_.push_back(op);
    if (!registration_started_.HasBeenNotified()) registration_started_.Notify();
  }
  void Heartbeat(const pb::HeartbeatRequest& request, pb::HeartbeatResponse* response,
                 absl::Duration, StatusCallback done) override {
    std::optional<absl::Status> fail;
    std::optional<Incarnation> incarnation;
    {
      absl::MutexLock lock(&mu_);
      ++heartbeats_;
      fail = fail_heartbeats_;
      if (replacement_ != nullptr && replacing_)
        fail = absl::UnavailableError("Connection refused");
      incarnation = fake_incarnation_;
    }
    if (fail) return done(*fail);
    handler_.load()->HeartbeatAsync(&request, response,
                                    [=, done = std::move(done)](absl::Status s) {
                                      if (incarnation)
                                        response->set_service_incarnation(*incarnation);
                                      done(std::move(s));
                                    });
  }
  void ReportError(const pb::ReportErrorRequest& request, pb::ReportErrorResponse* response,
                   absl::Duration, StatusCallback done) override {
    handler_.load()->ReportErrorAsync(&request, response, std::move(done));
  }
  void ReportPreemption(const pb::ReportPreemptionRequest& request,
                        pb::ReportPreemptionResponse* response, absl::Duration,
                        StatusCallback done) override {
    handler_.load()->ReportPreemptionAsync(&request, response, std::move(done));
  }
  void GetJobProgress(const pb::GetJobProgressRequest& request,
                      pb::GetJobProgressResponse* response, absl::Duration,
                      StatusCallback done) override {
    handler_.load()->GetJobProgressAsync(&request, response, std::move(done));
  }
  void ShutdownTask(const pb::ShutdownTaskRequest& request, pb::ShutdownTaskResponse* response,
                    absl::Duration, StatusCallback done) override {
    {
      absl::MutexLock lock(&mu_);
      if (hold_shutdowns_) {
        held_.push_back(std::move(done));
        return;
      }
    }
    Track(handler_.load()->ShutdownTaskAsync(&request, response, std::move(done)));
  }
  void InsertKeyValue(const pb::InsertKeyValueRequest& request,
                      pb::InsertKeyValueResponse* response, StatusCallback done) override {
    handler_.load()->InsertKeyValueAsync(&request, response, std::move(done));
  }
  void GetKeyValue(const pb::GetKeyValueRequest& request, pb::GetKeyValueResponse* response,
                   StatusCallback done) override {
    Track(handler_.load()->GetKeyValueAsync(&request, response, std::move(done)));
  }
  void TryGetKeyValue(const pb::TryGetKeyValueRequest& request,
                      pb::TryGetKeyValueResponse* response, StatusCallback done) override {
    handler_.load()->TryGetKeyValueAsync(&request, response, std::move(done));
  }
  void GetKeyValueDir(const pb::GetKeyValueDirRequest& request,
                      pb::GetKeyValueDirResponse* response, StatusCallback done) override {
    handler_.load()->GetKeyValueDirAsync(
        &request, response,
        [done = std::move(done)](absl::Status s, ReplyBudget::Charge) { done(std::move(s)); });
  }
  void DeleteKeyValue(const pb::DeleteKeyValueRequest& request,
                      pb::DeleteKeyValueResponse* response, StatusCallback done) override {
    handler_.load()->DeleteKeyValueAsync(&request, response, std::move(done));
  }
  void IncrementKeyValue(const pb::IncrementKeyValueRequest& request,
                         pb::IncrementKeyValueResponse* response, StatusCallback done) override {
    handler_.load()->IncrementKeyValueAsync(&request, response, std::move(done));
  }
  void Barrier(const pb::BarrierRequest& request, pb::BarrierResponse* response,
               StatusCallback done) override {
    Track(handler_.load()->BarrierAsync(&request, response, std::move(done)));
  }
  void CancelBarrier(const pb::CancelBarrierRequest& request, pb::CancelBarrierResponse* response,
                     StatusCallback done) override {
    handler_.load()->CancelBarrierAsync(&request, response, std::move(done));
  }

  std::unique_ptr<Watch> WatchJob(const pb::WatchJobRequest& request, EventCallback on_event,
                                  StatusCallback on_end) override {
    auto watch =
        std::make_unique<InProcessWatch>(handler_.load(), std::move(on_event), std::move(on_end));
    watch->Start(request);
    return watch;
  }

  bool ServiceReached() const override {
    absl::MutexLock lock(&mu_);
    return !fail_registrations_.has_value();
  }
  bool ServiceConnected() const override { return ServiceReached(); }

  // Cancels what waits in the service, as a transport would when its calls are cancelled. Held
  // calls stay held.
  void CancelAll() override {
    std::vector<OpId> ops;
    {
      absl::MutexLock lock(&mu_);
      ops.swap(waiting_);
    }
    for (OpId op : ops) handler_.load()->CancelOp(op);
    absl::MutexLock lock(&mu_);
    if (!cancelled_.HasBeenNotified()) cancelled_.Notify();
  }

 private:
  // A watch ends only when cancelled: the service never ends a job's event stream by itself.
  // Events go through a shared state that the end closes, so none is delivered after on_end
  // (the service may still be running a broadcast it started before the cancel).
  class InProcessWatch final : public Watch {
   public:
    InProcessWatch(CoordinationRpcHandler* handler, EventCallback on_event, StatusCallback on_end)
        : handler_(handler), state_(std::make_shared<State>()) {
      state_->on_event = std::move(on_event);
      state_->on_end = std::move(on_end);
    }
    ~InProcessWatch() override { Cancel(); }
    void Start(const pb::WatchJobRequest& request) {
      absl::StatusOr<OpId> op =
          handler_->WatchJob(&request, [state = state_](const pb::JobEvent& e) {
            absl::MutexLock lock(&state->mu);
            if (!state->ended) state->on_event(e);
          });
      if (!op.ok()) {
        End(op.status());
        return;
      }
      absl::MutexLock lock(&state_->mu);
      op_ = *op;
    }
    void Cancel() override {
      OpId op = 0;
      {
        absl::MutexLock lock(&state_->mu);
        op = std::exchange(op_, 0);
      }
      if (op != 0) handler_->CancelOp(op);
      End(absl::CancelledError("watch cancelled"));
    }

   private:
    struct State {
      absl::Mutex mu;
      bool ended ABSL_GUARDED_BY(mu) = false;
      EventCallback on_event ABSL_GUARDED_BY(mu);
      StatusCallback on_end ABSL_GUARDED_BY(mu);
    };
    void End(const absl::Status& status) {
      StatusCallback on_end;
      {
        absl::MutexLock lock(&state_->mu);  // Waits for an event being delivered.
        if (state_->ended) return;
        state_->ended = true;
        on_end = std::move(state_->on_end);
      }
      if (on_end) on_end(status);
    }
    CoordinationRpcHandler* const handler_;
    const std::shared_ptr<State> state_;
    OpId op_ ABSL_GUARDED_BY(state_->mu) = 0;
  };

  void Track(OpId op) {
    if (op == 0) return;
    absl::MutexLock lock(&mu_);
    waiting_.push_back(op);
  }

  std::atomic<CoordinationRpcHandler*> handler_;
  mutable absl::Mutex mu_;
  CoordinationRpcHandler* replacement_ ABSL_GUARDED_BY(mu_) = nullptr;
  int refusals_ ABSL_GUARDED_BY(mu_) = 0;
  bool replacing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> fail_registrations_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> fail_heartbeats_ ABSL_GUARDED_BY(mu_);
  std::optional<Incarnation> fake_incarnation_ ABSL_GUARDED_BY(mu_);
  bool hold_shutdowns_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<StatusCallback> held_ ABSL_GUARDED_BY(mu_);
  std::vector<OpId> waiting_ ABSL_GUARDED_BY(mu_);
  int heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification cancelled_;
  absl::Notification registration_started_;
};

}  // namespace cohort::coordination::testing
