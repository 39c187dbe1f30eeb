#pragma once

// The operator's end-to-end suite (one executable, a file per feature: operator_e2e_test.cc for
// the basics, operator_in_place_e2e_test.cc, operator_scheduling_e2e_test.cc,
// operator_failure_rules_e2e_test.cc, operator_hang_e2e_test.cc, operator_frameworks_e2e_test.cc):
// cohort-local-cluster (API server + kubelet), real kubectl, cohort-operator and DistributedJobs
// whose pods run test-trainer and cohort-sidecar as real processes that rendezvous through the
// injected environment. The fixture and the helpers more than one file uses.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "kube/conditions.h"
#include "operator/api/distributed_job.h"
#include "tests/common/python_environment.h"
#include "tests/e2e/local_control_plane.h"

namespace cohort::testing {

using json = nlohmann::json;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

inline constexpr absl::Duration kJobTimeout = absl::Seconds(90);

// A DistributedJob of `replicas` test-trainer ranks running `scenario`.
inline std::string JobYaml(const std::string& name, int replicas, const std::string& scenario,
                           const std::string& extra_spec = "",
                           const std::string& extra_pod_spec = "") {
  return absl::StrReplaceAll(R"(apiVersion: cohort.dev/v1alpha1
kind: DistributedJob
metadata:
  name: NAME
spec:
  replicas: REPLICAS
  maxRestarts: 2
  restartBackoff: 100ms
EXTRA_SPEC  template:
    spec:
EXTRA_POD_SPEC      containers:
        - name: trainer
          image: cohort/test-trainer:dev
          command: ["test-trainer", "SCENARIO"]
)",
                             {{"NAME", name},
                              {"REPLICAS", absl::StrCat(replicas)},
                              {"SCENARIO", scenario},
                              {"EXTRA_SPEC", extra_spec},
                              {"EXTRA_POD_SPEC", extra_pod_spec}});
}

// A spec.failurePolicy of one rule, for JobYaml's extra_spec: `matcher` is the rule's matcher
// line, e.g. "onExitCodes: {operator: In, values: [3]}".
inline std::string OneRule(const std::string& action, const std::string& matcher) {
  return absl::StrCat("  failurePolicy:\n    rules:\n      - action: ", action, "\n        ",
                      matcher, "\n");
}

inline bool Finished(const json& job) {
  return Phase(job) == "Succeeded" || Phase(job) == "Failed";
}
inline bool AllReady(const json& job) {
  return Phase(job) == "Running" && StatusInt(job, "ready") == job["spec"].value("replicas", 0);
}

inline std::string Events(LocalControlPlane& cluster, const std::string& job) {
  absl::StatusOr<json> events = cluster.client().List(kube::kEvents, "default", "");
  std::string out;
  if (!events.ok()) return out;
  for (const json& e : (*events)["items"]) {
    if (e["involvedObject"].value("name", "") == job)
      absl::StrAppend(&out, e.value("lastTimestamp", ""), " ", e.value("reason", ""), ": ",
                      e.value("message", ""), "\n");
  }
  return out;
}

// The job's Events once one contains `text` (the operator emits a pass's Events after its status
// write, so a test that saw the status may look a moment early); what there is after 10 s.
inline std::string EventsOnceThereIs(LocalControlPlane& cluster, const std::string& job,
                                     const std::string& text) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::string events = Events(cluster, job);
  while (!absl::StrContains(events, text) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    events = Events(cluster, job);
  }
  return events;
}

// What rank `rank`'s trainer of `job` wrote so far.
inline std::string PodTrainerLog(LocalControlPlane& cluster, const std::string& pod) {
  std::ifstream in(absl::StrCat(cluster.dir(), "/pods/default_", pod, "/trainer.log"));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
inline std::string TrainerLog(LocalControlPlane& cluster, const std::string& job, int rank) {
  return PodTrainerLog(cluster, absl::StrCat(job, "-", rank));
}

// Whether rank `rank`'s trainer of `job` writes `text` within kJobTimeout (its log is a file the
// kubelet appends to: looked at every 50 ms).
inline bool TrainerLogOnceItHas(LocalControlPlane& cluster, const std::string& job, int rank,
                                const std::string& text) {
  const absl::Time deadline = absl::Now() + kJobTimeout;
  while (!absl::StrContains(TrainerLog(cluster, job, rank), text)) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return true;
}

// One control plane for the suite: starting it costs a second; jobs have distinct names.
class OperatorE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new LocalControlPlane(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_->kubeconfig(), "") << "the local control plane did not start";
  }

  // An operator with this test's own Lease (a killed operator of an earlier test still holds
  // its own) and short leader-election timings.
  // On the suite's cluster, or on `cluster`.
  std::unique_ptr<WatchedProcess> StartOperator(const std::string& label,
                                                std::vector<std::string> flags = {},
                                                LocalControlPlane* cluster = nullptr) {
    std::vector<std::string> all = {"--leader-election-id",
                                    Lease(),
                                    "--leader-election-lease-duration",
                                    "2",
                                    "--leader-election-renew-deadline",
                                    "1.5",
                                    "--leader-election-retry-period",
                                    "0.2"};
    all.insert(all.end(), flags.begin(), flags.end());
    return (cluster ? cluster : cluster_)->StartOperator(label, all);
  }
  // Starts an operator and waits until it leads and its informers synced.
  std::unique_ptr<WatchedProcess> Operator(const std::string& label = "operator",
                                           std::vector<std::string> flags = {},
                                           LocalControlPlane* cluster = nullptr) {
    std::unique_ptr<WatchedProcess> op = StartOperator(label, std::move(flags), cluster);
    EXPECT_NE(op, nullptr);
    if (op) {
      EXPECT_NE(op->WaitForLine("informers synced", absl::Seconds(30)), "")
          << label << " did not start";
    }
    return op;
  }
  static std::string Lease() {
    std::string name =
        absl::AsciiStrToLower(::testing::UnitTest::GetInstance()->current_test_info()->name());
    return absl::StrCat("e2e-", absl::StrReplaceAll(name, {{"_", "-"}}));
  }

  static inline LocalControlPlane* cluster_ = nullptr;
};

inline std::map<std::string, std::string> PodUids(LocalControlPlane& cluster,
                                                  const std::string& job) {
  std::map<std::string, std::string> uids;
  absl::StatusOr<json> pods =
      cluster.client().List(kube::kPods, "default", absl::StrCat("cohort.dev/job-name=", job));
  if (!pods.ok()) return uids;
  for (const json& p : (*pods)["items"])
    uids[p["metadata"].value("name", "")] = p["metadata"].value("uid", "");
  return uids;
}

// spec.restartStrategy: InPlace (the default): a killed process restarts every pod's processes,
// and no pod is deleted or created; Recreate replaces every pod.

inline json JobCondition(const json& job, const std::string& type) {
  if (!job.is_object()) return json::object();
  for (const json& c : job.value("status", json::object()).value("conditions", json::array())) {
    if (c.value("type", "") == type) return c;
  }
  return json::object();
}

// spec.scheduling.queueName through real kubectl, the test playing Kueue: its webhook (which
// gives every pod of a queue the gate kueue.x-k8s.io/admission) through the template's
// schedulingGates, and its admission (which removes the gates of a whole pod group at once).

inline std::string PythonJobYaml(const std::string& name, const std::string& venv,
                                 const std::string& program, const std::string& args,
                                 const std::string& env_yaml, const std::string& extra_spec = "",
                                 const std::string& command = "") {
  return absl::StrReplaceAll(
      R"(apiVersion: cohort.dev/v1alpha1
kind: DistributedJob
metadata:
  name: NAME
spec:
  replicas: 2
  maxRestarts: 2
  restartBackoff: 100ms
EXTRA_SPEC  template:
    spec:
      containers:
        - name: trainer
          image: python:3.11
          command: ["PYTHON", "PROGRAM"ARGS]
          env:
            - name: JAX_PLATFORMS
              value: cpu
ENV)",
      {{"NAME", name},
       {"EXTRA_SPEC", extra_spec},
       {"PYTHON", command.empty() ? absl::StrCat(venv, "/bin/python") : command},
       {"PROGRAM", absl::StrCat(COHORT_SOURCE_DIR, "/", program)},
       {"ARGS", args.empty() ? "" : absl::StrCat(", \"", args, "\"")},
       {"ENV", env_yaml}});
}

// Waits until `rank`'s trainer log of `job` has a line containing `text`; returns the log then,
// or "" at the deadline (a restarted pod's log starts afresh, so read it while it is there).

inline std::string WaitForLog(LocalControlPlane& cluster, const std::string& job, int rank,
                              const std::string& text, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::string log = TrainerLog(cluster, job, rank);
    if (absl::StrContains(log, text)) return log;
    absl::SleepFor(absl::Milliseconds(20));  // A file, written by another process: polled.
  }
  return "";
}

// What the test programs recorded (COHORT_TEST_RECORD) across every restart attempt.

}  // namespace cohort::testing
