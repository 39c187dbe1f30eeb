// libcohort_dist.so is libdist's internal library linked whole (libdist/CMakeLists.txt); this
// file only gives the shared library a source of its own. It also pins what the public header
// promises to what the rest of Cohort reads: the exit statuses cohort-operator and cohort-run
// read, and dist::FailureCause to the one cause table (common/failure_cause.h), enumerator by
// enumerator, so that libdist converts between them with a cast.

#include "common/exit_codes.h"
#include "common/failure_cause.h"
#include "dist/distributed.h"

namespace {

constexpr bool Same(dist::FailureCause ours, cohort::FailureCause table) {
  return static_cast<int>(ours) == static_cast<int>(table);
}

}  // namespace

static_assert(Same(dist::FailureCause::kUnknown, cohort::FailureCause::kUnspecified));
static_assert(Same(dist::FailureCause::kCrash, cohort::FailureCause::kProcessExited));
static_assert(Same(dist::FailureCause::kHeartbeatTimeout, cohort::FailureCause::kHeartbeatTimeout));
static_assert(Same(dist::FailureCause::kPreempted, cohort::FailureCause::kPreempted));
static_assert(Same(dist::FailureCause::kRestarted, cohort::FailureCause::kRestarted));
static_assert(Same(dist::FailureCause::kReportedError, cohort::FailureCause::kReportedError));
static_assert(Same(dist::FailureCause::kRegistrationTimeout,
                   cohort::FailureCause::kRegistrationTimeout));
static_assert(Same(dist::FailureCause::kShutdownTimeout, cohort::FailureCause::kShutdownTimeout));
static_assert(Same(dist::FailureCause::kServiceLost, cohort::FailureCause::kServiceUnreachable));
static_assert(Same(dist::FailureCause::kCollectiveTimeout,
                   cohort::FailureCause::kCollectiveTimeout));
static_assert(Same(dist::FailureCause::kOutOfMemory, cohort::FailureCause::kOutOfMemory));
static_assert(Same(dist::FailureCause::kKilledBySignal, cohort::FailureCause::kKilledBySignal));
static_assert(Same(dist::FailureCause::kHung, cohort::FailureCause::kHung));
static_assert(std::size(cohort::kFailureCauses) == 13,
              "a new cause needs its public enumerator checked here");

static_assert(dist::kPeerFailureExitCode == cohort::kPeerFailureExitCode);
static_assert(dist::kPreemptedExitCode == cohort::kPreemptedExitCode);
