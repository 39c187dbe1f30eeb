#pragma once

// The second half of the collective watchdog: when a call times out, DiagnoseTimeout() reads the
// service's cross-rank progress table (progress_reporter.h) and names the rank(s) that are alive
// but never entered the call, those that stopped reporting, or the ranks that called something
// else, instead of "timed out".

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordination/core/types.h"
#include "libdist/src/collectives/collective_op.h"

namespace dist::internal {

struct TimeoutContext {
  std::string communicator;  // Its progress id.
  OpSignature sig;           // The call that timed out.
  int rank = 0;              // This rank.
  RankNames names;
  absl::Duration waited;  // How long this rank waited in it.
  // A program whose last report was older than this when its agent last heartbeat is called
  // stopped (a live one reports every ProgressReporter::kInterval; the heartbeat interval, which
  // only delays when the service hears it, does not count).
  absl::Duration stale_after;
};

// A sentence naming who held up the call, from the service's table; nullopt when the table does
// not explain it (e.g. every rank's report is missing).
std::optional<std::string> DiagnoseTimeout(
    const TimeoutContext& context, const std::vector<cohort::coordination::TaskProgress>& table);

}  // namespace dist::internal
