#pragma once

#include <map>
#include <string>

#include "absl/status/status.h"

// Hang detection's Python start-up hook (launcher/python_probe/; docs/faults.md, "Hung ranks"),
// which rides inside cohort-launch: `cohort-launch --install` writes it beside itself, and each
// process it starts gets it on its path.
namespace cohort {

// Copies this executable to `destination` (atomically, mode 0755), and the hook into python/
// beside it. The error names the directory and what it must be.
absl::Status InstallLauncher(const std::string& destination);

// The variables that put the hook on the path of the process of rank `rank` and give it a probe
// directory of its own (emptied of what an earlier process of the rank left); none when hang
// detection or the hook is turned off (COHORT_HANG_TIMEOUT=0, COHORT_PYTHON_PROBE=0), the pod has
// no agent socket (no sidecar to read it) or the hook was not installed beside cohort-launch.
std::map<std::string, std::string> ProbeVariables(const std::string& agent_socket, int rank);

}  // namespace cohort
