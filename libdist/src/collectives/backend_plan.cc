#include "libdist/src/collectives/backend_plan.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace dist::internal {
namespace {

// The ranks by host (their locality key), hosts in order of their lowest rank.
struct HostGroups {
  std::vector<std::vector<int>> hosts;
  std::vector<int> host_of;  // By rank.
  bool uniform = true;       // The same number of ranks on every host.
};
HostGroups GroupByHost(const std::vector<PeerInfo>& peers) {
  HostGroups g;
  std::map<std::string, int> index;
  for (int r = 0; r < static_cast<int>(peers.size()); ++r) {
    // A rank without a shared-memory socket is a host of its own.
    const std::string key = peers[r].shm.empty() ? absl::StrCat("rank-", r) : peers[r].locality;
    auto [it, inserted] = index.emplace(key, static_cast<int>(g.hosts.size()));
    if (inserted) g.hosts.emplace_back();
    g.hosts[it->second].push_back(r);
    g.host_of.push_back(it->second);
  }
  for (const auto& h : g.hosts) g.uniform &= h.size() == g.hosts[0].size();
  return g;
}

}  // namespace

std::string PeerInfo::Encode() const {
  return absl::StrJoin({locality, transport, shm, tcp, backend, nccl}, "\n");
}

PeerInfo PeerInfo::Decode(const std::string& s) {
  std::vector<std::string> f = absl::StrSplit(s, absl::MaxSplits('\n', 5));
  f.resize(6);
  return PeerInfo{f[0], f[1], f[2], f[3], f[4], f[5]};
}

absl::StatusOr<BackendPlan> PlanBackends(const std::vector<PeerInfo>& peers, int rank,
                                         const std::string& communicator, const RankNames& names) {
  const int size = static_cast<int>(peers.size());
  const PeerInfo& mine = peers[rank];
  for (int r = 0; r < size; ++r) {
    if (peers[r].backend != mine.backend || peers[r].transport != mine.transport) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the ranks of communicator '", communicator, "' asked for different backends: ",
          names.Name(r), " for COHORT_COLLECTIVES=", peers[r].backend,
          " COHORT_HOST_TRANSPORT=", peers[r].transport, ", ", names.Name(rank), " for ",
          mine.backend, " / ", mine.transport, "; set them alike on every process"));
    }
  }
  BackendPlan plan;
  std::vector<int> without_nccl;
  for (int r = 0; r < size; ++r) {
    if (!peers[r].nccl.empty()) without_nccl.push_back(r);
  }
  plan.nccl = mine.backend != "host" && without_nccl.empty();
  if (mine.backend == "nccl") {
    if (!plan.nccl) {
      const int first = without_nccl.front();
      return absl::UnavailableError(absl::StrCat("COHORT_COLLECTIVES=nccl, but ",
                                                 names.List(without_nccl), " cannot run NCCL (",
                                                 names.Name(first), ": ", peers[first].nccl, ")"));
    }
    return plan;  // No host backend.
  }

  if (size == 1) {
    plan.host = BackendPlan::Host::kSelf;
    plan.local = {0};
    plan.transport = "shared memory";
    return plan;
  }
  std::vector<int> remote;
  for (int r = 0; r < size; ++r) {
    if (peers[r].locality != mine.locality || peers[r].shm.empty()) remote.push_back(r);
  }
  if (mine.transport != "tcp" && remote.empty()) {
    plan.host = BackendPlan::Host::kShm;
    for (int r = 0; r < size; ++r) plan.local.push_back(r);
    plan.transport = "shared memory";
    return plan;
  }
  if (mine.transport == "shm") {
    return absl::UnavailableError(absl::StrCat(
        "COHORT_HOST_TRANSPORT=shm, but ", names.List(remote), " cannot share memory with ",
        names.Name(rank), " (another host or network namespace); use auto or tcp"));
  }
  plan.host = BackendPlan::Host::kTcp;
  plan.transport = "TCP";
  // Several ranks on each host: shared memory within hosts, TCP between them.
  const HostGroups groups = GroupByHost(peers);
  if (mine.transport == "auto" && groups.uniform && groups.hosts.size() > 1 &&
      groups.hosts[0].size() > 1) {
    plan.host = BackendPlan::Host::kHybrid;
    plan.local = groups.hosts[groups.host_of[rank]];
    const int local_rank = static_cast<int>(std::find(plan.local.begin(), plan.local.end(), rank) -
                                            plan.local.begin());
    for (const std::vector<int>& h : groups.hosts) plan.rail.push_back(h[local_rank]);
    plan.num_hosts = static_cast<int>(groups.hosts.size());
    plan.transport = absl::StrCat("shared memory within each of ", groups.hosts.size(), " hosts (",
                                  plan.local.size(), " ranks each) and TCP between them");
  }
  return plan;
}

}  // namespace dist::internal
