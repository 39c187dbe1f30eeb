#pragma once

// The operator's view of a job's attempt hub (rank 0's sidecar; coordination/attempts/
// attempt_hub.h): which attempt the pods' processes run, how each pod's processes ended, whose
// sidecar follows the hub, the spares ready to take a slot, and a hang the hub's detector found.
// operator/runtime/hub_attempt_watcher.cc builds it from the hub's stream (AttemptWatcher,
// attempt_watcher.h); the policies read it in their pass (DecisionPass::view): restarting in place
// (in_place_policy.h), spares (spare_policy.h) and hangs (hang_policy.h).

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/attempt_layout.h"

namespace cohort::op {

// What the job's attempt hub said last.
struct AttemptView {
  // False while the operator watches the hub but has heard nothing yet (it just started, or rank
  // 0's sidecar does not answer): nothing below is known, only since when it waits.
  bool heard = true;
  absl::Time watching_since = absl::InfinitePast();
  uint64_t hub_incarnation = 0;
  int32_t attempt = 0;                  // The attempt the pods' processes run (or last ran),
  std::optional<AttemptLayout> layout;  // and which pods it runs (nullopt: every pod).
  // How each pod's processes ended in `attempt`, by pod index (absent: still running).
  struct End {
    int32_t exit_code = 0;
    std::string reason;
    std::string message;
    absl::Time finished_at = absl::InfinitePast();
  };
  std::map<int32_t, End> ends;
  // The pods whose sidecar follows the hub now (a pod on a lost node, or whose sidecar died,
  // does not), and those whose sidecar followed it at some time since the operator watches it
  // (one that did and follows no more is gone; one that never did may still be starting).
  std::set<int32_t> following;
  std::set<int32_t> followed;
  // Hot spares whose sidecar follows the hub now, holding no slot, by pod name.
  std::set<std::string> spares;
  bool connected = false;  // The stream is up now (else: what it said before it broke).

  // A hang the hub's detector found in `attempt` (docs/faults.md, "Hung ranks"): ranks that made
  // no progress for longer than their timeout. Absent: none (or it cleared).
  struct Hang {
    uint64_t id = 0;  // New per hang the hub found (a later one has a larger id).
    int32_t attempt = 0;
    absl::Time detected_at = absl::InfinitePast();
    struct Rank {
      int32_t rank = 0;
      int32_t pod_index = 0;
      int32_t local = 0;  // Its index among its pod's processes.
      std::string where;  // "train.py:88 in step: time.sleep(3600)" ("" when unknown).
    };
    std::vector<Rank> outliers;  // The ranks named as hung, the likeliest cause first.
    // Every other rank, grouped by where it waits ("all_reduce at train.py:91").
    struct Group {
      std::vector<int32_t> ranks;
      std::string where;
    };
    std::vector<Group> groups;
    // Evidence: every pod's processes dumped their stacks (or the hub stopped waiting for them).
    bool dumps_complete = false;
    int32_t pods_dumped = 0;
    int32_t pods_total = 0;
    std::string dumps_dir;  // Where each pod keeps them ("/run/cohort/dumps/attempt-0").
  };
  std::optional<Hang> hang;
};

}  // namespace cohort::op
