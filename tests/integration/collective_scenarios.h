#pragma once

#include <string>

#include "dist/distributed.h"

namespace cohort::testing {

// The collectives scenarios of test-trainer (tests/integration/collectives_test.cc runs them).
// Sets `options` for the scenario before Initialize; returns true when `scenario` is one of them.
bool IsCollectiveScenario(const std::string& scenario, dist::Options* options);
// Runs it after Initialize; the exit status.
int RunCollectiveScenario(const std::string& scenario);

}  // namespace cohort::testing
