#pragma once

#include <atomic>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "cohort/coordination/v1/coordination.grpc.pb.h"
#include "common/grpc_util.h"
#include "coordination/client/coordination_stub.h"
#include "coordination/client/session_client.h"

namespace cohort::coordination {

// The coordination service over gRPC: unary RPCs for registration, heartbeats, error reports,
// preemption and shutdown; key-value and barrier calls as messages on one Session stream (opened
// on first use, reopened after it broke); WatchJob on a server stream. Every call carries the
// job token and waits for the channel to become ready, so ranks may start in any order.
//
// Destruction cancels every call in flight and waits until each has completed. Thread-safe.
class GrpcCoordinationStub final : public CoordinationStub {
 public:
  GrpcCoordinationStub(const std::string& address, std::string token);
  ~GrpcCoordinationStub() override;

  void RegisterTask(const pb::RegisterTaskRequest& request, pb::RegisterTaskResponse* response,
                    absl::Duration timeout, StatusCallback done) override;
  void Heartbeat(const pb::HeartbeatRequest& request, pb::HeartbeatResponse* response,
                 absl::Duration timeout, StatusCallback done) override;
  void ReportError(const pb::ReportErrorRequest& request, pb::ReportErrorResponse* response,
                   absl::Duration timeout, StatusCallback done) override;
  void GetJobProgress(const pb::GetJobProgressRequest& request,
                      pb::GetJobProgressResponse* response, absl::Duration timeout,
                      StatusCallback done) override;
  void ReportPreemption(const pb::ReportPreemptionRequest& request,
                        pb::ReportPreemptionResponse* response, absl::Duration timeout,
                        StatusCallback done) override;
  void ShutdownTask(const pb::ShutdownTaskRequest& request, pb::ShutdownTaskResponse* response,
                    absl::Duration timeout, StatusCallback done) override;

  void InsertKeyValue(const pb::InsertKeyValueRequest& request,
                      pb::InsertKeyValueResponse* response, StatusCallback done) override;
  void GetKeyValue(const pb::GetKeyValueRequest& request, pb::GetKeyValueResponse* response,
                   StatusCallback done) override;
  void TryGetKeyValue(const pb::TryGetKeyValueRequest& request,
                      pb::TryGetKeyValueResponse* response, StatusCallback done) override;
  void GetKeyValueDir(const pb::GetKeyValueDirRequest& request,
                      pb::GetKeyValueDirResponse* response, StatusCallback done) override;
  void DeleteKeyValue(const pb::DeleteKeyValueRequest& request,
                      pb::DeleteKeyValueResponse* response, StatusCallback done) override;
  void IncrementKeyValue(const pb::IncrementKeyValueRequest& request,
                         pb::IncrementKeyValueResponse* response, StatusCallback done) override;
  void Barrier(const pb::BarrierRequest& request, pb::BarrierResponse* response,
               StatusCallback done) override;
  void CancelBarrier(const pb::CancelBarrierRequest& request, pb::CancelBarrierResponse* response,
                     StatusCallback done) override;

  std::unique_ptr<Watch> WatchJob(const pb::WatchJobRequest& request, EventCallback on_event,
                                  StatusCallback on_end) override;
  bool ServiceReached() const override;
  bool ServiceConnected() const override;
  void CancelAll() override;

 private:
  class WatchCall;
  template <typename Interface, typename Req, typename Resp>
  void Unary(void (Interface::*method)(grpc::ClientContext*, const Req*, Resp*,
                                       std::function<void(grpc::Status)>),
             const Req& request, Resp* response, absl::Duration timeout, StatusCallback done,
             bool wait_for_ready = true);
  template <typename Req, typename Resp>
  void OnSession(const Req& request, Resp* response, StatusCallback done);
  // Notes whether the channel has connected, after a call completed.
  void NoteChannelState(const absl::Status& status);

  const std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::CoordinationService::Stub> stub_;
  ClientCallSet calls_;
  mutable std::atomic<bool> reached_{false};  // Set once a connection was seen open.

  absl::Mutex mu_;
  std::shared_ptr<SessionClient> session_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::coordination
