#pragma once

// For tests that run a real Python program (jax, torch from PyPI): the target defines
// COHORT_SOURCE_DIR and COHORT_BUILD_DIR.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"

namespace cohort::testing {

// Makes (once, shared by every test that names it) the virtual environment
// build/python/<name> with `packages` from PyPI, using tests/setup_python_venv.sh and the
// interpreter `python`. Returns its directory; "" when PyPI cannot be reached (the caller skips
// and says so); a test failure when the setup fails otherwise.
inline std::string PythonEnvironment(const std::string& name, const std::string& module,
                                     const std::vector<std::string>& packages,
                                     const std::string& python = "python3") {
  std::string venv = absl::StrCat(COHORT_BUILD_DIR, "/python/", name);
  std::vector<std::string> argv = {absl::StrCat(COHORT_SOURCE_DIR, "/tests/setup_python_venv.sh"),
                                   venv, module};
  argv.insert(argv.end(), packages.begin(), packages.end());
  absl::StatusOr<Subprocess> setup =
      Subprocess::Start(Subprocess::Options{argv, {{"PYTHON", python}}, /*capture_output=*/false});
  EXPECT_TRUE(setup.ok()) << setup.status();
  if (!setup.ok()) return "";
  int code = Subprocess::ExitCodeOf(setup->Wait());
  EXPECT_TRUE(code == 0 || code == 77) << "tests/setup_python_venv.sh " << venv << " failed";
  return code == 0 ? venv : "";
}

// The pinned versions the tests use.
inline std::string JaxEnvironment(const std::string& version,
                                  const std::string& python = "python3") {
  return PythonEnvironment(absl::StrCat("jax-", version), "jax",
                           {absl::StrCat("jax==", version), absl::StrCat("jaxlib==", version)},
                           python);
}
inline std::string TorchEnvironment() {
  return PythonEnvironment("torch-2.15.0", "torch.distributed", {"torch==2.15.0", "numpy==2.4.6"});
}

// The cohort package's test environments (python/tests/run_tests.sh --environment-only):
// build/python/cohort-test (the wheel of this build, numpy, torch 2.15.0), returned by
// CohortPythonEnvironment(), and build/python/cohort-jax-<version> (the wheel and that jax), by
// CohortJaxEnvironment(version). "" when PyPI cannot be reached (the caller skips and says so); a
// test failure when the setup fails otherwise.
inline std::string CohortPythonEnvironment(const std::string& name = "cohort-test") {
  std::vector<std::string> argv = {"bash",
                                   absl::StrCat(COHORT_SOURCE_DIR, "/python/tests/run_tests.sh"),
                                   COHORT_SOURCE_DIR, COHORT_BUILD_DIR, "--environment-only"};
  absl::StatusOr<Subprocess> setup =
      Subprocess::Start(Subprocess::Options{argv, {}, /*capture_output=*/false});
  EXPECT_TRUE(setup.ok()) << setup.status();
  if (!setup.ok()) return "";
  int code = Subprocess::ExitCodeOf(setup->Wait());
  EXPECT_TRUE(code == 0 || code == 77) << "python/tests/run_tests.sh --environment-only failed";
  return code == 0 ? absl::StrCat(COHORT_BUILD_DIR, "/python/", name) : "";
}
inline std::string CohortJaxEnvironment(const std::string& version) {
  return CohortPythonEnvironment(absl::StrCat("cohort-jax-", version));
}

}  // namespace cohort::testing
