#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/agent/v1/agent.grpc.pb.h"
#include "common/grpc_event_stream.h"
#include "coordination/client/agent.h"
#include "sidecar/agent/trainer_outcome.h"

namespace cohort::sidecar {

namespace agentpb = ::cohort::agent::v1;
namespace pb = ::cohort::coordination::v1;
using coordination::Agent;
using coordination::AgentOptions;

class SidecarMetrics;

// Serves libdist on the sidecar's Unix socket (the cohort.agent.v1.Agent protocol). A trainer's
// Attach creates this rank's Agent, which registers with the coordination service; the Attach
// stream then carries job events to the trainer. If the stream breaks before the trainer shut
// down (crash, kill -9, OOM), the agent reports the trainer's death at once, so peers learn of
// it in milliseconds rather than after a heartbeat timeout. Other calls are forwarded to the
// Agent's JobClient calls without blocking a thread.
//
// One trainer at a time. Thread-safe.
class AgentRpcService final : public agentpb::Agent::CallbackService {
 public:
  // `options` names this sidecar's rank, job size, coordinator and token; `metrics` may be null.
  AgentRpcService(AgentOptions options, SidecarMetrics* metrics);
  ~AgentRpcService() override;

  grpc::ServerWriteReactor<agentpb::AgentEvent>* Attach(grpc::CallbackServerContext* ctx,
                                                        const agentpb::AttachRequest* req) override;
  grpc::ServerUnaryReactor* ShutdownTask(grpc::CallbackServerContext* ctx,
                                         const pb::ShutdownTaskRequest* req,
                                         pb::ShutdownTaskResponse* resp) override;
  grpc::ServerUnaryReactor* ReportError(grpc::CallbackServerContext* ctx,
                                        const pb::ReportErrorRequest* req,
                                        pb::ReportErrorResponse* resp) override;
  grpc::ServerUnaryReactor* InsertKeyValue(grpc::CallbackServerContext* ctx,
                                           const pb::InsertKeyValueRequest* req,
                                           pb::InsertKeyValueResponse* resp) override;
  grpc::ServerUnaryReactor* GetKeyValue(grpc::CallbackServerContext* ctx,
                                        const pb::GetKeyValueRequest* req,
                                        pb::GetKeyValueResponse* resp) override;
  grpc::ServerUnaryReactor* TryGetKeyValue(grpc::CallbackServerContext* ctx,
                                           const pb::TryGetKeyValueRequest* req,
                                           pb::TryGetKeyValueResponse* resp) override;
  grpc::ServerUnaryReactor* GetKeyValueDir(grpc::CallbackServerContext* ctx,
                                           const pb::GetKeyValueDirRequest* req,
                                           pb::GetKeyValueDirResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteKeyValue(grpc::CallbackServerContext* ctx,
                                           const pb::DeleteKeyValueRequest* req,
                                           pb::DeleteKeyValueResponse* resp) override;
  grpc::ServerUnaryReactor* IncrementKeyValue(grpc::CallbackServerContext* ctx,
                                              const pb::IncrementKeyValueRequest* req,
                                              pb::IncrementKeyValueResponse* resp) override;
  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx, const pb::BarrierRequest* req,
                                    pb::BarrierResponse* resp) override;
  grpc::ServerUnaryReactor* CancelBarrier(grpc::CallbackServerContext* ctx,
                                          const pb::CancelBarrierRequest* req,
                                          pb::CancelBarrierResponse* resp) override;
  grpc::ServerUnaryReactor* ReportStep(grpc::CallbackServerContext* ctx,
                                       const agentpb::ReportStepRequest* req,
                                       agentpb::ReportStepResponse* resp) override;
  grpc::ServerUnaryReactor* ReportProgress(grpc::CallbackServerContext* ctx,
                                           const agentpb::ReportProgressRequest* req,
                                           agentpb::ReportProgressResponse* resp) override;
  grpc::ServerUnaryReactor* GetJobProgress(grpc::CallbackServerContext* ctx,
                                           const pb::GetJobProgressRequest* req,
                                           pb::GetJobProgressResponse* resp) override;
  grpc::ServerUnaryReactor* ReportPreemption(grpc::CallbackServerContext* ctx,
                                             const pb::ReportPreemptionRequest* req,
                                             pb::ReportPreemptionResponse* resp) override;

  // The sidecar received SIGTERM: tell the job (once the rank is connected).
  void OnPreemptionSignal();

  // Waits until the trainer shut down or failed, StopWaiting() is called, or the deadline passes.
  TrainerOutcome WaitForTrainer(absl::Time deadline);
  void StopWaiting();
  // Ends the trainer's attach stream with `status` (the sidecar is exiting), so that the trainer
  // is told why at once instead of when the server's shutdown cancels the stream.
  void DetachTrainer(const absl::Status& status);
  // Restarting in place, a new attempt began: this service's rank belongs to an older one. The
  // trainer's attach stream ends with `status`; its going is no failure of anyone's (the job
  // already restarts), so it is not reported: the service at the same address is the new
  // attempt's by then, where it would read as a death of the new attempt's rank.
  void Retire(const absl::Status& status);
  // The job's hang detector asks the attached trainer for its evidence (libdist writes its
  // threads' stacks and flight recorder into `directory`, then `dumped`). False when no trainer is
  // attached and connected to take it.
  bool RequestDump(uint64_t id, const std::string& directory);
  // A trainer process is attached now (its Attach stream is open and it has not ended). False as
  // soon as the process is gone, even while its going is still being reported to the job.
  bool trainer_attached() const;
  bool trainer_ever_attached() const;
  bool agent_connected() const;

 private:
  using Finish = std::function<void(absl::Status)>;
  // The connected agent, or FailedPrecondition explaining that initialize() must come first.
  absl::StatusOr<std::shared_ptr<Agent>> ConnectedAgent();
  // Checks the token and that the rank is connected, then runs `call(agent, finish)`, where
  // `finish` completes the RPC (and counts a key-value operation named `metric_op`, if any).
  template <typename Call>
  grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* ctx, const char* metric_op,
                                    Call call);
  void OnTrainerGone(int64_t pid);
  // Reports the preemption straight to the service for whatever process holds this rank there
  // (the observer incarnation); waits up to 2 s.
  void ReportPreemptionAsObserver();
  void SetOutcome(TrainerOutcome outcome);

  const AgentOptions options_;
  SidecarMetrics* const metrics_;

  mutable absl::Mutex mu_;
  std::shared_ptr<Agent> agent_ ABSL_GUARDED_BY(mu_);
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
  bool trainer_gone_ ABSL_GUARDED_BY(mu_) = false;  // Its Attach stream ended: the process is gone.
  bool trainer_shut_down_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_sent_ ABSL_GUARDED_BY(mu_) = false;  // The trainer was told it is connected.
  bool preemption_signalled_ ABSL_GUARDED_BY(mu_) = false;
  TrainerOutcome outcome_ ABSL_GUARDED_BY(mu_) = TrainerOutcome::kRunning;
  bool stop_waiting_ ABSL_GUARDED_BY(mu_) = false;
  bool connect_failed_ ABSL_GUARDED_BY(mu_) = false;  // The agent could not join the job.
  bool retired_ ABSL_GUARDED_BY(mu_) = false;         // Retire() was called.
  // The trainer's attach stream, while attached.
  std::shared_ptr<EventStream<agentpb::AgentEvent>::Sink> attach_sink_ ABSL_GUARDED_BY(mu_);
  std::thread connect_thread_;  // Runs Agent::Connect, which blocks until all ranks register.
};

}  // namespace cohort::sidecar
