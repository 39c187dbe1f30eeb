#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "cohort/coordination/v1/attempts.grpc.pb.h"
#include "common/attempt_layout.h"

// The callers of rank 0's attempt hub (attempt_hub.h): a pod's sidecar follows the attempts and
// reports its processes' ends; the operator observes the state and starts the next attempt.
namespace cohort::coordination {

namespace attemptspb = ::cohort::coordination::v1;

// The attempt control port: the coordinator port + env::kAttemptControlPortOffset. InvalidArgument
// when `coordinator_address` has no port.
absl::StatusOr<std::string> AttemptControlAddress(const std::string& coordinator_address);

// How a stream's thread is stopped: the flag it checks, and the call it is in (cancelled).
struct StreamControl {
  absl::Notification stop;
  absl::Mutex mu;
  grpc::ClientContext* current ABSL_GUARDED_BY(mu) = nullptr;
  // Notifies `stop` and cancels the call in flight.
  void Stop();
};

// One of the hub's streams, kept open: reconnected with backoff when it breaks (rank 0's pod not
// up yet, restarted, a network blip) until the object is destroyed. `on_message` runs on the
// stream's own thread, `on_broken` there too each time a stream that had delivered ends.
class AttemptFollower {
 public:
  // `pod_name`: this pod's (a pod whose slot a spare took is then not let back).
  AttemptFollower(std::string hub_address, std::string token, int32_t pod_index,
                  std::function<void(const attemptspb::AttemptOrder&)> on_order,
                  std::string pod_name = "");
  // A spare pod's sidecar (FollowAttemptsRequest.spare): follows as spare `spare_name` until an
  // order gives it a pod index, and as the spare holding that index from then on (also when it
  // reconnects).
  // `pod_index`: the slot it holds already (its sidecar restarted as that pod's).
  static std::unique_ptr<AttemptFollower> Spare(
      std::string hub_address, std::string token, std::string spare_name,
      std::function<void(const attemptspb::AttemptOrder&)> on_order, int32_t pod_index = 0);
  ~AttemptFollower();
  // Reports how this pod's processes ended (retried for up to `patience` while the hub is
  // unreachable).
  absl::Status ReportEnd(const attemptspb::AttemptEnd& end,
                         absl::Duration patience = absl::Seconds(30));
  // Tells the hub how this pod's ranks progress: once, within `timeout` (the next report follows
  // a second later).
  absl::Status ReportHealth(const attemptspb::ReportHealthRequest& report,
                            absl::Duration timeout = absl::Seconds(2));

 private:
  AttemptFollower(std::string hub_address, std::string token,
                  attemptspb::FollowAttemptsRequest identity,
                  std::function<void(const attemptspb::AttemptOrder&)> on_order);
  void Loop();
  const std::string token_;
  attemptspb::FollowAttemptsRequest identity_;  // Only the stream's thread changes it.
  std::function<void(const attemptspb::AttemptOrder&)> on_order_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<attemptspb::AttemptControl::Stub> stub_;
  StreamControl control_;
  std::thread thread_;
};

class AttemptObserver {
 public:
  AttemptObserver(std::string hub_address, std::string token,
                  std::function<void(const attemptspb::AttemptState&)> on_state,
                  std::function<void(const absl::Status&)> on_broken);
  ~AttemptObserver();
  const std::string& address() const { return address_; }
  // Orders attempt `attempt` (the hub's StartAttempt), within `timeout`; `assignments` give
  // spares the slots of pods that are gone (AttemptHub::Start).
  absl::Status Start(int32_t attempt, absl::Duration timeout = absl::Seconds(5));
  absl::Status Start(int32_t attempt, const std::vector<attemptspb::SpareAssignment>& assignments,
                     absl::Duration timeout = absl::Seconds(5));
  // ... and `layout`: the pods the attempt runs (an elastic job's resize; nullopt: every pod).
  absl::Status Start(int32_t attempt, const std::vector<attemptspb::SpareAssignment>& assignments,
                     const std::optional<AttemptLayout>& layout,
                     absl::Duration timeout = absl::Seconds(5));
  // Asks the processes of `attempt` to stop at a common step (the hub's DrainAttempt).
  absl::Status Drain(int32_t attempt, const std::string& reason,
                     absl::Duration timeout = absl::Seconds(5));

 private:
  void Loop();
  const std::string address_;
  const std::string token_;
  std::function<void(const attemptspb::AttemptState&)> on_state_;
  std::function<void(const absl::Status&)> on_broken_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<attemptspb::AttemptControl::Stub> stub_;
  StreamControl control_;
  std::thread thread_;
};

}  // namespace cohort::coordination
