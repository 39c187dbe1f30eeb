#include "common/env.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cohort::env {

std::optional<std::string> Get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

absl::StatusOr<std::optional<int64_t>> GetInt(const char* name) {
  std::optional<std::string> value = Get(name);
  if (!value) return std::optional<int64_t>();
  int64_t parsed;
  if (!absl::SimpleAtoi(*value, &parsed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "='", *value,
                     "' is not an integer; set it to a whole number or unset it"));
  }
  return std::optional<int64_t>(parsed);
}

absl::StatusOr<int> CoordinatorPort(absl::string_view address) {
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coordinator address '", address,
        "' has no valid port; write it as host:port, e.g. myjob-0.myjob.default.svc:8476"));
  }
  return port;
}

absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text) {
  absl::Duration d;
  double seconds;
  absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  if (absl::SimpleAtod(trimmed, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(trimmed, &d)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a duration; write it like 30s, 250ms, 5m or a number of seconds"));
  }
  if (d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("duration '", text, "' is negative"));
  }
  return d;
}

absl::StatusOr<std::optional<absl::Duration>> GetDuration(const char* name) {
  std::optional<std::string> value = Get(name);
  if (!value) return std::optional<absl::Duration>();
  absl::StatusOr<absl::Duration> d = ParseDuration(*value);
  if (!d.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, ": ", d.status().message()));
  }
  return std::optional<absl::Duration>(*d);
}

std::vector<std::pair<std::string, std::string>> ProcessVariables(const ProcessPlacement& p,
                                                                  bool gpus) {
  const std::string rank = absl::StrCat(p.rank());
  const std::string world = absl::StrCat(p.world_size());
  const std::string local = absl::StrCat(p.local_index);
  const std::string per_pod = absl::StrCat(p.processes_per_pod);
  const std::string pod = absl::StrCat(p.pod_index);
  std::vector<std::pair<std::string, std::string>> vars = {
      {kNumProcesses, world},    {kProcessId, rank},
      {kLocalProcessId, local},  {kProcessesPerPod, per_pod},
      {kJaxNumProcesses, world}, {kJaxProcessId, rank},
      {kWorldSize, world},       {kRank, rank},
      {kLocalRank, local},       {kLocalWorldSize, per_pod},
      {kGroupRank, pod},         {kNodeRank, pod}};
  if (gpus) vars.emplace_back(kJaxLocalDeviceIds, local);
  if (p.replica_groups > 0) {
    vars.emplace_back(kReplicaGroups, absl::StrCat(p.replica_groups));
    vars.emplace_back(kDesiredReplicaGroups, absl::StrCat(p.desired_replica_groups));
  }
  return vars;
}

std::vector<std::pair<std::string, std::string>> JobVariables(const JobInputs& in) {
  std::vector<std::pair<std::string, std::string>> vars;
  auto add = [&](const char* name, std::string value) {
    if (!value.empty()) vars.emplace_back(name, std::move(value));
  };
  auto duration = [](const std::optional<absl::Duration>& d) {
    return d ? absl::FormatDuration(*d) : std::string();
  };
  add(kCoordinatorAddress, in.coordinator_address);
  add(kRestartAttempt, absl::StrCat(in.restart_attempt));
  add(kAgentSocket, in.agent_socket);
  add(kLaunchSocket, in.launch_socket);
  add(kShmDir, in.shm_dir);
  add(kJobName, in.job_name);
  add(kNamespace, in.namespace_name);
  add(kTokenFile, in.token_file);
  add(kPodIp, in.pod_ip);
  add(kPodName, in.pod_name);
  add(kHeartbeatTimeout, duration(in.heartbeat_timeout));
  add(kInitializationTimeout, duration(in.initialization_timeout));
  add(kShutdownTimeout, duration(in.shutdown_timeout));
  if (!in.rank0_host.empty() && in.jax_port > 0) {
    add(kJaxCoordinatorAddress, absl::StrCat(in.rank0_host, ":", in.jax_port));
    add(kJaxCoordinatorBindAddress, kJaxUnusedBindAddress);
  }
  const std::string master_port = in.master_port > 0 ? absl::StrCat(in.master_port) : "";
  if (!in.rank0_host.empty() && in.master_port > 0) {
    add(kMasterAddr, in.rank0_host);
    add(kMasterPort, master_port);
  }
  if (in.torchrun) {
    add(kTorchrunNumNodes, absl::StrCat(in.placement.num_pods));
    add(kTorchrunProcsPerNode, absl::StrCat(in.placement.processes_per_pod));
    add(kTorchrunNodeRank, absl::StrCat(in.placement.pod_index));
    add(kTorchrunMasterAddr, in.rank0_host);
    add(kTorchrunMasterPort, master_port);
  }
  return vars;
}

std::string AgentSocketPath(absl::string_view base, int local_index, int served) {
  if (served <= 1) return std::string(base);
  absl::string_view stem = base;
  absl::ConsumeSuffix(&stem, ".sock");
  return absl::StrCat(stem, "-", local_index, ".sock");
}

namespace {
absl::string_view DirOf(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? absl::string_view(".") : path.substr(0, slash);
}
}  // namespace

std::string ProbeDir(absl::string_view agent_socket, int rank) {
  return absl::StrCat(DirOf(agent_socket), "/probe/rank-", rank);
}

std::string DumpsDir(absl::string_view agent_socket) {
  return absl::StrCat(DirOf(agent_socket), "/dumps");
}

absl::StatusOr<ProcessPlacement> PodPlacementFromEnvironment() {
  auto required = [](const char* name) -> absl::StatusOr<int64_t> {
    absl::StatusOr<std::optional<int64_t>> v = GetInt(name);
    if (!v.ok()) return v.status();
    if (!v->has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "environment variable ", name,
          " is not set; the Cohort operator (or cohort-run) sets it in every job pod"));
    }
    return **v;
  };
  absl::StatusOr<int64_t> first_rank = required(kProcessId);
  if (!first_rank.ok()) return first_rank.status();
  absl::StatusOr<int64_t> world = required(kNumProcesses);
  if (!world.ok()) return world.status();
  absl::StatusOr<std::optional<int64_t>> per_pod = GetInt(kProcessesPerPod);
  if (!per_pod.ok()) return per_pod.status();
  const int64_t k = per_pod->value_or(1);
  if (k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kProcessesPerPod, "=", k, " must be at least 1"));
  }
  if (*world < 1 || *world % k != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kNumProcesses, "=", *world, " is not a positive multiple of ", kProcessesPerPod, "=", k,
        "; the job runs the same number of processes in every pod"));
  }
  if (*first_rank < 0 || *first_rank >= *world || *first_rank % k != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kProcessId, "=", *first_rank, " is not the rank of a pod's first process (a multiple of ",
        kProcessesPerPod, "=", k, " below ", kNumProcesses, "=", *world, ")"));
  }
  ProcessPlacement p;
  p.processes_per_pod = static_cast<int>(k);
  p.num_pods = static_cast<int>(*world / k);
  p.pod_index = static_cast<int>(*first_rank / k);
  for (auto [name, out] : {std::pair{kReplicaGroups, &p.replica_groups},
                           std::pair{kDesiredReplicaGroups, &p.desired_replica_groups}}) {
    absl::StatusOr<std::optional<int64_t>> groups = GetInt(name);
    if (!groups.ok()) return groups.status();
    *out = static_cast<int>(groups->value_or(0));
  }
  return p;
}

}  // namespace cohort::env
