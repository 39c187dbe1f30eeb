// libcohort_dist.so is libdist's internal library linked whole (libdist/CMakeLists.txt); this
// file only gives the shared library a source of its own. It also pins the exit statuses the
// public header promises to the ones cohort-operator and cohort-run read.

#include "common/exit_codes.h"
#include "dist/distributed.h"

static_assert(dist::kPeerFailureExitCode == cohort::kPeerFailureExitCode);
static_assert(dist::kPreemptedExitCode == cohort::kPreemptedExitCode);
