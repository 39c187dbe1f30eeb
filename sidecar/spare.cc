#include "sidecar/spare.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/log.h"

extern char** environ;

namespace cohort::sidecar {
namespace {

// The environment of this process with `set` replacing or adding variables.
std::vector<std::string> EnvironmentWith(
    const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const auto& [name, value] : set) replaced |= entry.rfind(name + "=", 0) == 0;
    if (!replaced) out.push_back(entry);
  }
  for (const auto& [name, value] : set) out.push_back(absl::StrCat(name, "=", value));
  return out;
}

}  // namespace

int RunSpare(Sidecar& sidecar, const SidecarConfig& config, const std::vector<std::string>& argv) {
  const std::optional<SpareSlot> slot = sidecar.WaitForSlot();
  if (!slot) return 0;  // A signal: it said so.
  const int first_rank = slot->pod_index * config.processes_per_pod;
  LogInfo("spare ", config.spare, ": takes pod index ", slot->pod_index, " (ranks ", first_rank,
          "-", first_rank + config.processes_per_pod - 1, ") in restart attempt ", slot->attempt,
          "; restarting as that pod's sidecar");
  sidecar.ReleaseForExec();
  std::vector<std::string> env =
      EnvironmentWith({{env::kProcessId, absl::StrCat(first_rank)},
                       {env::kRestartAttempt, absl::StrCat(slot->attempt)}});
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  execve("/proc/self/exe", args.data(), envp.data());
  LogError("spare ", config.spare, ": cannot restart as pod ", slot->pod_index,
           "'s sidecar: ", std::strerror(errno));
  return 1;
}

}  // namespace cohort::sidecar
