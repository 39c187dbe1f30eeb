#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/attempt_layout.h"
#include "common/process/launch_protocol.h"
#include "coordination/attempts/attempt_client.h"
#include "coordination/attempts/attempt_hub.h"
#include "sidecar/launch_channel.h"
#include "sidecar/metrics/sidecar_metrics.h"
#include "sidecar/progress_watch.h"
#include "sidecar/sidecar_config.h"

// Restarting in place (spec.restartStrategy: InPlace): the sidecar's half of the flow. The
// operator decides (operator/reconciler/in_place_policy.h) and orders the next attempt from rank
// 0's attempt hub (coordination/attempts/attempt_hub.h), which this runner hosts on rank 0's pod;
// on every other pod it follows the hub. Each order gives the pod's ranks fresh agents (the
// sidecar's), then tells cohort-launch on the launch socket (launch_channel.h), whose attempt loop
// (launcher/attempt_loop.h) stops and starts the processes; how they ended goes back to the hub.
// The progress watch (progress_watch.h) reports the ranks' progress to the hub and collects a
// hang's evidence when it asks. A spare pod (SidecarConfig::spare) follows as a spare until an
// order gives it a slot (sidecar/spare.h then re-executes the sidecar as that pod's).
namespace cohort::sidecar {

// Where this pod's ranks stand in one attempt: as the pod's environment says, or where an
// elastic job's attempt layout (common/attempt_layout.h) places the pod, or nowhere (idle).
struct AttemptPlace {
  int32_t attempt = 0;
  bool idle = false;          // The attempt runs without this pod.
  int32_t first_rank = 0;     // This pod's first rank in it (its environment's when idle).
  int32_t num_processes = 0;  // The attempt's world size.
  std::optional<AttemptLayout> layout;         // The attempt's, when it has one,
  std::optional<launch::Placement> placement;  // and this pod's place in it (not idle).
  // What cohort-launch is told.
  launch::AttemptOrder launch_order() const {
    return launch::AttemptOrder{.attempt = attempt, .placement = placement, .idle = idle};
  }
};

// The slot an attempt gave a spare pod.
struct SpareSlot {
  int32_t pod_index = 0;
  int32_t attempt = 0;
};

class AttemptRunner {
 public:
  // What the runner asks of the sidecar that owns it (called on the runner's threads).
  struct Hooks {
    // Rank 0, before any pod hears of the attempt: its coordination service, of its size.
    std::function<void(const AttemptPlace& place)> restart_coordinator;
    // Every rank of the pod gets a fresh agent of the attempt (its rank and world size there),
    // before cohort-launch is told.
    std::function<void(const AttemptPlace& place)> renew_agents;
    // Rank 0: the operator drains `attempt` (an elastic job's resize): every rank is to stop at
    // the preemption sync point.
    std::function<void(int32_t attempt)> drain;
    // Rank 0: the hub recorded how a pod's processes of the running attempt ended.
    std::function<void(const coordination::attemptspb::AttemptEnd& end)> on_end;
    // Hang evidence from a process without the Python hook (libdist's dump).
    std::function<bool(int local, uint64_t id, const std::string& directory)> ask_process;
  };

  // Serves the launch socket, starts the progress watch (unless hang detection is off), then the
  // hub (rank 0) or a follower of it. InvalidArgument naming the setting that is malformed;
  // Unavailable when the hub's port is taken.
  static absl::StatusOr<std::unique_ptr<AttemptRunner>> Start(const SidecarConfig& config,
                                                              std::vector<SidecarMetrics*> metrics,
                                                              Hooks hooks);
  ~AttemptRunner();
  AttemptRunner(const AttemptRunner&) = delete;
  AttemptRunner& operator=(const AttemptRunner&) = delete;

  // Runs attempt after attempt as the hub orders them until Stop() or Preempting(). The first
  // waits for the hub's order up to kFirstOrderPatience (then starts without it). A pod preempted
  // before its processes of the attempt started is reported as such (nobody else can say so).
  void Run();
  // A spare: waits until an attempt gives it a slot (nullopt: stopped first).
  std::optional<SpareSlot> AwaitSlot();
  // From the signal thread: the waiting ends (a stop), or the pod is going (a preemption notice).
  void Stop();
  void Preempting();
  // A spare: it follows the hub (readiness).
  bool following() const;
  const std::string& hub_address() const { return hub_address_; }

  // How long a pod's first attempt waits to hear from the attempt hub.
  static constexpr absl::Duration kFirstOrderPatience = absl::Seconds(10);

 private:
  AttemptRunner(const SidecarConfig& config, Hooks hooks)
      : config_(config), hooks_(std::move(hooks)) {}
  void StartProgressWatch(std::vector<SidecarMetrics*> metrics);
  absl::Status StartHub(const coordination::HangTimeout& timeout);
  void StartFollower();
  void OnOrder(const coordination::attemptspb::AttemptOrder& order);
  // Where attempt `attempt` of layout `layout` (nullopt: the job's own) places this pod.
  AttemptPlace PlaceOf(int32_t attempt, const std::optional<AttemptLayout>& layout) const;
  void BeginAttempt(const AttemptPlace& place);
  void ReportEnded(const launch::AttemptEnded& ended);

  const SidecarConfig& config_;
  const Hooks hooks_;
  std::string hub_address_;
  mutable absl::Mutex mu_;
  std::optional<int32_t> ordered_ ABSL_GUARDED_BY(mu_);               // The attempt ordered last,
  std::optional<AttemptLayout> ordered_layout_ ABSL_GUARDED_BY(mu_);  // and its layout.
  int32_t attempt_ ABSL_GUARDED_BY(mu_) = 0;                          // The one the agents serve.
  // cohort-launch was told to run attempt_: at once on rank 0, else once the hub runs it (a pod
  // that replaces one alone is created for the next attempt while the hub still runs the last).
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool preempting_ ABSL_GUARDED_BY(mu_) = false;
  bool following_ ABSL_GUARDED_BY(mu_) = false;         // A spare heard the hub.
  std::optional<SpareSlot> slot_ ABSL_GUARDED_BY(mu_);  // A spare's, once given.
  // Destroyed after the hub and the follower, whose threads call it (its own thread is stopped
  // first, in the destructor).
  std::unique_ptr<ProgressWatch> progress_;
  std::unique_ptr<coordination::AttemptHubServer> hub_;      // Rank 0.
  std::unique_ptr<coordination::AttemptFollower> follower_;  // Every other pod, and a spare.
  std::unique_ptr<LaunchChannel> launch_;
};

}  // namespace cohort::sidecar
