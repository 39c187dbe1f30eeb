#pragma once

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/job_settings.h"

// The three timeout flags, declared once for every binary that takes them (cohort-sidecar,
// cohort-run), so that their names and help stay the same. Header-only, as CLI11 is: common
// itself does not link CLI11.
namespace cohort {

// Adds --initialization-timeout, --heartbeat-timeout and --shutdown-timeout to `app`, writing
// what is given into `flags` (left empty when not given; ParseTimeoutFlags reads them).
inline void AddTimeoutFlags(CLI::App& app, TimeoutFlags* flags) {
  app.add_option("--initialization-timeout", flags->initialization,
                 absl::StrCat("How long ranks may take to join the job (env "
                              "COHORT_INITIALIZATION_TIMEOUT, default ",
                              absl::FormatDuration(kDefaultInitializationTimeout), ")"));
  app.add_option("--heartbeat-timeout", flags->heartbeat,
                 absl::StrCat("A rank silent this long has failed (env COHORT_HEARTBEAT_TIMEOUT, "
                              "default ",
                              absl::FormatDuration(kDefaultHeartbeatTimeout), ")"));
  app.add_option("--shutdown-timeout", flags->shutdown,
                 absl::StrCat("Bound on the shutdown barrier, and on how long rank 0 keeps the "
                              "service up for slower ranks (env COHORT_SHUTDOWN_TIMEOUT, default ",
                              absl::FormatDuration(kDefaultShutdownTimeout), ")"));
}

}  // namespace cohort
