#pragma once

// Bringing a restart attempt up: the backoff after a restart, creating the ranks once every old
// pod is gone, and the job Running once every rank runs, Succeeded once every rank exited 0.

#include "operator/reconciler/decision_pass.h"

namespace cohort::op {

// Restarting: waits out the backoff (RestartBackoff of status.restarts after a counted failure,
// the first backoff after anything else; decides), then Pending.
Verdict EndBackoff(DecisionPass& pass);
// Pending: creates the ranks that have no pod, once every pod of the old restart attempts is
// gone. Not rank by rank: a new rank started beside a still-terminating old rank 0 can reach
// that process's servers under the same address and port (the coordination service, or the
// TCPStore a PyTorch rank 0 serves on MASTER_PORT) and join the dying attempt. Continues.
Verdict CreateMissingRanks(DecisionPass& pass);
// Pending: condition Scheduled says whether every pod of the attempt is placed on a node, and if
// not, why (SchedulingGated: an admission controller such as Kueue holds them; Unschedulable: no
// node has room) and how many are. Waiting is never a failure. Continues.
Verdict ReportScheduling(DecisionPass& pass);
// Every rank Succeeded: the job succeeds. Every rank running while Pending: Running.
Verdict CompleteOrMarkRunning(DecisionPass& pass);

}  // namespace cohort::op
