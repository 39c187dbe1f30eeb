#pragma once

// What the tests of Decide() and of each of its policies share: a fixed "now", jobs in a given
// phase, gangs of observed pods, and a table row for one policy run on its own.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/reconciler/decision_pass.h"
#include "operator/reconciler/job_decision.h"
#include "tests/operator/job_builder.h"
#include "tests/operator/pod_builder.h"

namespace cohort::op::testing {

inline const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

inline DistributedJob Job(std::function<void(DistributedJob&)> change = nullptr,
                          nlohmann::json obj = JobBuilder().Build()) {
  DistributedJob job = *ParseDistributedJob(obj);
  if (change) change(job);
  return job;
}

// A job whose status says it is in `phase` of `restart_attempt`, entered `ago` before kNow
// (a Restarting job after a counted failure).
inline std::function<void(DistributedJob&)> InPhase(Phase phase, int32_t restart_attempt = 0,
                                                    absl::Duration ago = absl::Minutes(1)) {
  return [=](DistributedJob& j) {
    j.status.phase = phase;
    j.status.restart_attempt = restart_attempt;
    j.status.start_time = FormatRfc3339(kNow - absl::Hours(1));
    if (phase == Phase::kRestarting) {
      j.status.last_restart_kind = "Failure";
      SetCondition(j.status.conditions,
                   Condition{"Restarting", "True", "Failure", "x", FormatRfc3339(kNow - ago), 1});
    }
  };
}

// Four running ranks of `restart_attempt`, each then changed by `each`.
inline std::vector<ObservedPod> Gang(int32_t restart_attempt,
                                     std::function<void(int, PodBuilder&)> each) {
  std::vector<ObservedPod> pods;
  for (int r = 0; r < 4; ++r) {
    PodBuilder p(r, restart_attempt);
    p.Running();
    each(r, p);
    pods.push_back(p);
  }
  return pods;
}
inline const auto AllRunning = [](int, PodBuilder&) {};

// One policy run alone on a fresh DecisionPass, and what it must have decided.
struct PolicyCase {
  std::string name;
  Verdict (*policy)(DecisionPass&);
  DistributedJob job;
  std::vector<ObservedPod> pods;
  Verdict verdict;
  Phase phase;
  size_t creates = 0;
  size_t deletes = 0;
  std::string event_reason = "";                         // Of the first Event; "" for none.
  std::string event_message = "";                        // A substring of it.
  std::optional<absl::Duration> requeue = std::nullopt;  // nullopt: none asked for.
  int32_t restarts = 0;
  int32_t preemptions = 0;
  bool delete_job = false;
};

inline void CheckPolicyCase(const PolicyCase& c) {
  DecisionPass pass(c.job, c.pods, kNow, DecideOptions{});
  EXPECT_EQ(c.policy(pass), c.verdict) << "verdict";
  const Decision& d = pass.decision;
  EXPECT_EQ(std::string(PhaseName(d.status.phase)), PhaseName(c.phase));
  EXPECT_EQ(d.create_ranks.size(), c.creates) << "pods created";
  EXPECT_EQ(d.delete_pods.size(), c.deletes) << "pods deleted";
  EXPECT_EQ(d.status.restarts, c.restarts);
  EXPECT_EQ(d.status.preemptions, c.preemptions);
  EXPECT_EQ(d.requeue_after, c.requeue);
  EXPECT_EQ(d.delete_job, c.delete_job);
  if (c.event_reason.empty()) {
    EXPECT_TRUE(d.events.empty()) << d.events[0].reason << ": " << d.events[0].message;
  } else {
    ASSERT_FALSE(d.events.empty());
    EXPECT_EQ(d.events[0].reason, c.event_reason);
    EXPECT_THAT(d.events[0].message, ::testing::HasSubstr(c.event_message));
  }
}

inline std::string PolicyCaseName(const ::testing::TestParamInfo<PolicyCase>& info) {
  return info.param.name;
}

}  // namespace cohort::op::testing
