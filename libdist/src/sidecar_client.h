#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cohort/agent/v1/agent.grpc.pb.h"
#include "common/grpc_util.h"
#include "coordination/client/job_client.h"
#include "coordination/core/types.h"

namespace dist::internal {

namespace agentpb = ::cohort::agent::v1;
using cohort::coordination::FailureCause;
using cohort::coordination::TaskId;

// libdist's agent mode: the JobClient of this pod's cohort-sidecar, over its Unix socket.
// Attach() holds a stream open for the life of the process; the sidecar treats the stream
// breaking as this process's death, and sends job events down it. One reader thread.
// The destructor detaches and waits until every call has completed. Thread-safe.
class SidecarClient final : public cohort::coordination::JobClient {
 public:
  using EventCallback = std::function<void(const cohort::coordination::JobEvent&)>;

  SidecarClient(std::string socket_path, std::string token);
  ~SidecarClient() override;

  // Blocks until the sidecar reports that every process registered, or fails with its error.
  // `on_event` then gets each job event; the loss of the sidecar arrives as a failure with
  // cause kServiceUnreachable.
  absl::Status Attach(int process_id, int num_processes, std::optional<int> restart_attempt,
                      absl::Duration timeout, EventCallback on_event);
  // Closes the stream (after Shutdown, so the sidecar knows this was no crash).
  void Detach();

  void InsertKeyValue(std::string key, std::string value, bool allow_overwrite,
                      DoneCallback done) override;
  void GetKeyValue(std::string key, absl::Duration timeout, ValueCallback done) override;
  void TryGetKeyValue(std::string key, ValueCallback done) override;
  void GetKeyValueDir(std::string directory, EntriesCallback done) override;
  void DeleteKeyValue(std::string key, DoneCallback done) override;
  void IncrementKeyValue(std::string key, int64_t increment, IntCallback done) override;
  void Barrier(std::string id, absl::Duration timeout, std::vector<TaskId> participants,
               DoneCallback done) override;
  void CancelBarrier(std::string id, DoneCallback done) override;
  void ReportPreemption(DoneCallback done) override;
  void ReportError(FailureCause cause, std::string message, DoneCallback done) override;
  void ReportProgress(std::vector<cohort::coordination::CollectiveProgress> progress,
                      DoneCallback done) override;
  void ReportStep(int64_t step, DoneCallback done) override;
  void GetJobProgress(ProgressCallback done) override;
  void Shutdown(DoneCallback done) override;

 private:
  template <typename Req, typename Resp>
  void Call(void (agentpb::Agent::StubInterface::async_interface::*method)(
                grpc::ClientContext*, const Req*, Resp*, std::function<void(grpc::Status)>),
            Req request, absl::Duration timeout, std::function<void(absl::Status, Resp)> done);

  const std::string socket_path_;
  const std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<agentpb::Agent::Stub> stub_;
  cohort::ClientCallSet calls_;

  absl::Mutex mu_;
  grpc::ClientContext* attach_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool detaching_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reader_;
};

}  // namespace dist::internal
