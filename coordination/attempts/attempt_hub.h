#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/coordination/v1/attempts.grpc.pb.h"
#include "common/grpc_event_stream.h"
#include "coordination/attempts/attempt_ledger.h"
#include "coordination/attempts/hang_detector.h"
#include "coordination/attempts/slot_registry.h"

// Restarting a job's processes in place (spec.restartStrategy: InPlace, docs/operator.md
// "Restarting in place"): rank 0's sidecar hosts the hub, which knows the attempt the job's
// processes run and how each pod's processes ended in it. The operator decides; the hub only
// records and passes on:
//
//   operator --StartAttempt(n+1)--> hub --AttemptOrder(n+1)--> every pod's sidecar -> cohort-launch
//   cohort-launch -> its sidecar --ReportAttemptEnd--> hub --AttemptState--> operator
//   every sidecar --ReportHealth--> hub (HangDetector) --AttemptState.hang--> operator
//                                   hub --AttemptOrder.dump_id--> every sidecar: evidence
//
// The hub lives as long as rank 0's pod; the coordination service beside it is started anew for
// every attempt (its state is the attempt's, its port the same).
//
// The hub is the gRPC adapter over two pure parts, under one mutex: AttemptLedger
// (attempt_ledger.h: the attempt, the ends, the hang and its evidence, with the HangDetector) and
// SlotRegistry (slot_registry.h: who follows as which pod, the spares and the slots they took).
// It keeps the streams, pushes the orders and publishes the state.
namespace cohort::coordination {

namespace attemptspb = ::cohort::coordination::v1;

class AttemptHub final : public attemptspb::AttemptControl::CallbackService {
 public:
  // The pods' first attempt is `first_attempt` (COHORT_RESTART_ATTEMPT of rank 0's pod). Calls
  // must carry `token` (empty: no authentication).
  AttemptHub(int32_t first_attempt, std::string token);
  ~AttemptHub() override;

  // Runs inside Start(), before any pod hears of the new attempt (`order`: what they will hear,
  // with its layout): rank 0's sidecar starts the attempt's coordination service there, of the
  // attempt's size, so that the pods' new processes find it.
  void set_before_start(std::function<void(const attemptspb::AttemptOrder& order)> hook) {
    before_start_ = std::move(hook);
  }
  // Runs (outside the hub's lock) for each end of the current attempt that ReportEnd records:
  // rank 0's sidecar tells the attempt's coordination service, so that the other processes learn
  // of a death their service could not see (a process killed before it joined).
  void set_on_end(std::function<void(const attemptspb::AttemptEnd& end)> hook) {
    on_end_ = std::move(hook);
  }
  // Runs (outside the hub's lock) for a drain of the running attempt (DrainAttempt): rank 0's
  // sidecar gives the attempt's coordination service a preemption notice.
  void set_on_drain(std::function<void(int32_t attempt, const std::string& reason)> hook) {
    on_drain_ = std::move(hook);
  }
  // Rank 0's own sidecar follows the hub in process: `order` gets every attempt from now on.
  void FollowLocally(std::function<void(const attemptspb::AttemptOrder& order)> order);
  // Hang detection (docs/faults.md, "Hung ranks"): the timeout, where each pod keeps the evidence
  // (`dumps_base`/attempt-<n>), and how rank 0's own sidecar is asked for it (outside the lock).
  void set_hang_detection(HangTimeout timeout, std::string dumps_base,
                          std::function<void(uint64_t dump_id, int32_t attempt)> dump_locally);

  // Starts attempt `attempt`: OK when it is the current attempt + 1 (or already the current
  // one: a repeated order, whose assignments are ignored); FailedPrecondition otherwise.
  // `assignments` give spares the slots of pods that are gone (FollowAttemptsRequest.spare): each
  // spare hears the attempt with its pod index and follows as that pod from then on; a pod that
  // still follows that index is let go. FailedPrecondition, starting nothing, for pod index 0, a
  // spare that does not follow, or a spare or index named twice; a spare that goes while the
  // attempt starts is left out (the slot is then not followed). `layout`: the pods the attempt
  // runs (an elastic job's resize; every follower hears it with the order), nullopt for every
  // pod of the job; FailedPrecondition naming the problem for one that cannot be run.
  absl::Status Start(int32_t attempt,
                     const std::vector<attemptspb::SpareAssignment>& assignments = {},
                     std::optional<AttemptLayout> layout = std::nullopt);
  // Asks the processes of `attempt`, the running one, to stop at a common step (on_drain, once
  // per attempt). FailedPrecondition for another attempt.
  absl::Status Drain(int32_t attempt, const std::string& reason);
  // Records how a pod's processes ended; one of an earlier attempt is dropped.
  void ReportEnd(const attemptspb::AttemptEnd& end);
  // Records what a pod's sidecar says of its ranks' progress (one of an earlier attempt is
  // dropped), and that the pod collected a hang's evidence.
  // (Its own name: the RPC handler ReportHealth below is the gRPC service's overload.)
  void RecordHealth(const attemptspb::ReportHealthRequest& report, absl::Time now);
  // Runs the hang detector at `now` (rank 0's sidecar, every second): a new hang is published
  // and every pod asked for evidence; the evidence is complete when every pod that follows has
  // collected it, or AttemptLedger::kDumpPatience after the hang was found; a hang whose ranks
  // moved again
  // clears.
  void CheckHang(absl::Time now);
  attemptspb::AttemptState State() const;
  uint64_t incarnation() const { return incarnation_; }
  // Ends every stream (followers and observers see the hub go).
  void Close();

  grpc::ServerWriteReactor<attemptspb::AttemptOrder>* FollowAttempts(
      grpc::CallbackServerContext* ctx, const attemptspb::FollowAttemptsRequest* req) override;
  grpc::ServerUnaryReactor* ReportAttemptEnd(grpc::CallbackServerContext* ctx,
                                             const attemptspb::ReportAttemptEndRequest* req,
                                             attemptspb::ReportAttemptEndResponse* resp) override;
  grpc::ServerWriteReactor<attemptspb::AttemptState>* ObserveAttempts(
      grpc::CallbackServerContext* ctx, const attemptspb::ObserveAttemptsRequest* req) override;
  grpc::ServerUnaryReactor* StartAttempt(grpc::CallbackServerContext* ctx,
                                         const attemptspb::StartAttemptRequest* req,
                                         attemptspb::StartAttemptResponse* resp) override;
  grpc::ServerUnaryReactor* ReportHealth(grpc::CallbackServerContext* ctx,
                                         const attemptspb::ReportHealthRequest* req,
                                         attemptspb::ReportHealthResponse* resp) override;
  grpc::ServerUnaryReactor* DrainAttempt(grpc::CallbackServerContext* ctx,
                                         const attemptspb::DrainAttemptRequest* req,
                                         attemptspb::DrainAttemptResponse* resp) override;

 private:
  using OrderSink = EventStream<attemptspb::AttemptOrder>::Sink;
  using StateSink = EventStream<attemptspb::AttemptState>::Sink;

  attemptspb::AttemptState StateLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  attemptspb::AttemptOrder OrderLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes the state to every observer (and drops those gone).
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes `order` to a follower's stream; false (and the stream forgotten) when it is gone.
  bool PushLocked(SlotRegistry::StreamId stream, const attemptspb::AttemptOrder& order)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes `order` to every pod that follows but those in `skip`.
  void PushToFollowersLocked(const attemptspb::AttemptOrder& order,
                             const std::set<int32_t>& skip = {}) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndLocked(const SlotRegistry::Ending& ending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Carries out `assignments` with `order` (each spare hears it with its pod index); the pod
  // indices spares took.
  std::set<int32_t> GiveSlotsLocked(const std::vector<attemptspb::SpareAssignment>& assignments,
                                    const attemptspb::AttemptOrder& order)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string token_;
  const uint64_t incarnation_;
  std::function<void(const attemptspb::AttemptOrder&)> before_start_;
  std::function<void(const attemptspb::AttemptEnd&)> on_end_;
  std::function<void(uint64_t, int32_t)> dump_locally_;
  std::function<void(int32_t, const std::string&)> on_drain_;
  mutable absl::Mutex mu_;
  AttemptLedger ledger_ ABSL_GUARDED_BY(mu_);
  SlotRegistry slots_ ABSL_GUARDED_BY(mu_);
  // The followers' streams (pods and spares), by the id the registry knows them by.
  std::map<SlotRegistry::StreamId, std::shared_ptr<OrderSink>> streams_ ABSL_GUARDED_BY(mu_);
  SlotRegistry::StreamId last_stream_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t drained_ ABSL_GUARDED_BY(mu_) = -1;  // The attempt drained last.
  std::vector<std::function<void(const attemptspb::AttemptOrder&)>> local_followers_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<StateSink>> observers_ ABSL_GUARDED_BY(mu_);
};

// The hub on its own gRPC port, as rank 0's sidecar runs it.
class AttemptHubServer {
 public:
  // Unavailable when `listen_address` cannot be bound.
  static absl::StatusOr<std::unique_ptr<AttemptHubServer>> Start(const std::string& listen_address,
                                                                 int32_t first_attempt,
                                                                 std::string token);
  ~AttemptHubServer();
  AttemptHub& hub() { return *hub_; }
  int port() const { return port_; }

 private:
  std::unique_ptr<AttemptHub> hub_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace cohort::coordination
