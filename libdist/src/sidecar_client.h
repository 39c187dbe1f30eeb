#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cohort/agent/v1/agent.grpc.pb.h"
#include "sidecar/agent/control_plane.h"
#include "sidecar/coordination/types.h"

namespace dist::internal {

namespace pb = ::cohort::coordination::v1;
namespace agentpb = ::cohort::agent::v1;

// libdist's agent mode: the ControlPlane of this pod's cohort-sidecar, over its Unix socket.
// Attach() holds a stream open for the life of the process; the sidecar treats the stream
// breaking as this process's death, and sends job events down it. One reader thread.
// Thread-safe.
class SidecarClient final : public cohort::agent::ControlPlane {
 public:
  using EventCallback = std::function<void(const cohort::coordination::JobEvent&)>;

  SidecarClient(std::string socket_path, std::string token);
  ~SidecarClient() override;

  // Blocks until the sidecar reports that every process registered, or fails with its error.
  // `on_event` then gets each job event; the loss of the sidecar arrives as a failure with
  // cause kServiceUnreachable.
  absl::Status Attach(int process_id, int num_processes, absl::Duration timeout,
                      EventCallback on_event);
  // Closes the stream (after Shutdown, so the sidecar knows this was no crash).
  void Detach();

  void InsertKeyValue(pb::InsertKeyValueRequest req,
                      Callback<pb::InsertKeyValueResponse> done) override;
  void GetKeyValue(pb::GetKeyValueRequest req, Callback<pb::GetKeyValueResponse> done) override;
  void TryGetKeyValue(pb::TryGetKeyValueRequest req,
                      Callback<pb::TryGetKeyValueResponse> done) override;
  void GetKeyValueDir(pb::GetKeyValueDirRequest req,
                      Callback<pb::GetKeyValueDirResponse> done) override;
  void DeleteKeyValue(pb::DeleteKeyValueRequest req,
                      Callback<pb::DeleteKeyValueResponse> done) override;
  void IncrementKeyValue(pb::IncrementKeyValueRequest req,
                         Callback<pb::IncrementKeyValueResponse> done) override;
  void Barrier(pb::BarrierRequest req, Callback<pb::BarrierResponse> done) override;
  void CancelBarrier(pb::CancelBarrierRequest req,
                     Callback<pb::CancelBarrierResponse> done) override;
  void ReportPreemption(Callback<pb::ReportPreemptionResponse> done) override;
  void ReportError(cohort::coordination::FailureCause cause, std::string message,
                   Callback<pb::ReportErrorResponse> done) override;
  void Shutdown(Callback<pb::ShutdownTaskResponse> done) override;

 private:
  template <typename Req, typename Resp, typename Invoke>
  void Unary(Req req, absl::Duration timeout, Invoke invoke, Callback<Resp> done);

  const std::string socket_path_;
  const std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<agentpb::Agent::Stub> stub_;

  absl::Mutex mu_;
  grpc::ClientContext* attach_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool detaching_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reader_;
};

}  // namespace dist::internal
