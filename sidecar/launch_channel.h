#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/process/launch_protocol.h"

namespace cohort::sidecar {

// The sidecar's end of the launch socket (common/process/launch_protocol.h): cohort-launch connects
// to it, hears which attempt to run and says how its processes ended. One connection at a time (a
// new one replaces the last); the attempt ordered last is sent to each at once.
class LaunchChannel {
 public:
  // Serves `path` (a stale socket there is replaced), ordering `attempt` as the pod's environment
  // says (none yet: cohort-launch waits for Order). InvalidArgument naming the path when it
  // cannot be served.
  static absl::StatusOr<std::unique_ptr<LaunchChannel>> Serve(
      const std::string& path, std::optional<int32_t> attempt,
      std::function<void(const launch::AttemptEnded&)> on_ended);
  ~LaunchChannel();
  // Tells cohort-launch to run `order` (now, or when it connects): its attempt, with its
  // placement or idle (an elastic job's attempt); with a pod index, as that pod from then on (a
  // spare that took a slot), which later orders repeat.
  void Order(launch::AttemptOrder order);
  // This pod holds pod index `pod_index` (a spare's sidecar, restarted as the pod whose slot it
  // took): every order says so, from the first.
  void HoldPodIndex(int32_t pod_index);

 private:
  LaunchChannel() = default;
  void AcceptLoop();
  void ReadLoop(int fd);

  std::string path_;
  std::function<void(const launch::AttemptEnded&)> on_ended_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // Written to stop the accept loop.
  absl::Mutex mu_;
  std::optional<launch::AttemptOrder> order_ ABSL_GUARDED_BY(mu_);  // The one ordered last.
  std::optional<int32_t> pod_index_ ABSL_GUARDED_BY(mu_);           // Once given, in every order.
  int conn_fd_ ABSL_GUARDED_BY(mu_) = -1;
  std::thread accept_thread_;
  std::thread read_thread_;
};

}  // namespace cohort::sidecar
