#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "localcluster/kubelet/pod_runtime.h"

namespace cohort::local {

// One container of a pod as the pod worker runs it: its spec, its runtime's handle, and what
// the pod's status reports of it.
struct Container {
  nlohmann::json spec;
  bool sidecar = false;
  bool init = false;
  std::string log_path;
  RuntimeContainer run;
  std::optional<absl::Time> started;
  std::optional<int> exit_code;
  std::string reason;
  std::string message;
  std::optional<absl::Time> finished;
  int restarts = 0;
  bool ready = false;
  absl::Time next_probe;
  std::string start_error;
  int64_t memory_limit = 0;  // resources.limits.memory in bytes; 0: none.
  bool oom_killed = false;
  // A main container that exited under restartPolicy Always/OnFailure: when it starts again.
  std::optional<absl::Time> restart_at;
  // Exits in a row without a 10-minute run between them: the next restart's back-off.
  int crash_streak = 0;
  bool start_failed = false;  // StartContainer could not start it (counts as an exit).
};

}  // namespace cohort::local
