#include "operator/runtime/operator_metrics.h"

#include <memory>
#include <string>

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::op {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kCreated = absl::FromUnixSeconds(1'800'000'000);

class OperatorMetricsTest : public ::testing::Test {
 protected:
  std::string Text() { return prometheus::TextSerializer().Serialize(registry_->Collect()); }

  // A pass over ml/train at `now` that restarted the gang and/or saw it reach Running.
  void Pass(absl::Time now, std::optional<GangRestart> restart, bool running = false) {
    ReconcileReport report;
    report.now = now;
    report.job_created = kCreated;
    report.restart = restart;
    if (restart)
      report.event_reasons.push_back(restart->cause == FailureCause::kPreempted ? "Preempted"
                                                                                : "GangRestart");
    if (running) report.event_reasons.push_back("Running");
    metrics_.ObserveReconcile("ml/train", absl::Milliseconds(3), absl::OkStatus(), report);
  }

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  OperatorMetrics metrics_{*registry_};
};

TEST_F(OperatorMetricsTest, PhaseOfEachJobIsOneSeriesPerPhase) {
  metrics_.SetJobPhase("ml/train", Phase::kPending);
  metrics_.SetJobPhase("ml/train", Phase::kRunning);
  std::string text = Text();
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(cohort_operator_job_phase{cohort_job="train",job_namespace="ml",phase="Running"} 1)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(cohort_operator_job_phase{cohort_job="train",job_namespace="ml",phase="Pending"} 0)"));
  EXPECT_THAT(text, HasSubstr(R"(cohort_operator_jobs{phase="Running"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(cohort_operator_jobs{phase="Pending"} 0)"));
}

TEST_F(OperatorMetricsTest, TimeToRunningDetectAndRecoveryPerJob) {
  metrics_.SetJobPhase("ml/train", Phase::kPending);
  Pass(kCreated + absl::Seconds(7), std::nullopt, /*running=*/true);
  // Rank 2 was killed at +100 s; the operator decided the restart at +101.5 s; all ranks ran
  // again at +112 s.
  Pass(kCreated + absl::Seconds(101.5),
       GangRestart{FailureCause::kKilledBySignal, kCreated + absl::Seconds(100), "Failure"});
  Pass(kCreated + absl::Seconds(112), std::nullopt, /*running=*/true);
  // An eviction (no failure time): recovery counts from the decision.
  Pass(kCreated + absl::Seconds(200),
       GangRestart{FailureCause::kPreempted, absl::InfinitePast(), "Preemption"});
  Pass(kCreated + absl::Seconds(230), std::nullopt, /*running=*/true);

  std::string text = Text();
  const std::string job = R"(cohort_job="train",job_namespace="ml")";
  EXPECT_THAT(text, HasSubstr("cohort_operator_job_time_to_running_seconds_sum{" + job + "} 7"));
  EXPECT_THAT(text, HasSubstr("cohort_operator_job_time_to_running_seconds_count{" + job + "} 1"));
  EXPECT_THAT(text, HasSubstr("cohort_operator_job_failure_detect_seconds_sum{" + job + "} 1.5"));
  EXPECT_THAT(text, HasSubstr("cohort_operator_job_failure_detect_seconds_count{" + job + "} 1"));
  EXPECT_THAT(text, HasSubstr("cohort_operator_job_recovery_seconds_sum{" + job + "} 42"));
  EXPECT_THAT(text, HasSubstr("cohort_operator_job_recovery_seconds_count{" + job + "} 2"));
  EXPECT_THAT(text,
              HasSubstr("cohort_operator_job_restarts_total{cause=\"signal\"," + job + "} 1"));
  EXPECT_THAT(text,
              HasSubstr("cohort_operator_job_restarts_total{cause=\"preempted\"," + job + "} 1"));
  EXPECT_THAT(text, HasSubstr("cohort_operator_gang_restarts_total 1"));
  EXPECT_THAT(text, HasSubstr("cohort_operator_preemptions_total 1"));
}

// Recovery split by restart kind and stage: in place, the old processes are gone when the
// operator orders the next attempt; recreating, when it creates the next attempt's pods.
TEST_F(OperatorMetricsTest, RecoveryStagesByRestartKind) {
  metrics_.SetJobPhase("ml/train", Phase::kRunning);
  GangRestart in_place{FailureCause::kKilledBySignal, kCreated + absl::Seconds(9), "Failure"};
  in_place.in_place = true;
  Pass(kCreated + absl::Seconds(10), in_place);
  ReconcileReport ordered;
  ordered.now = kCreated + absl::Seconds(11);
  ordered.started_attempt = true;
  metrics_.ObserveReconcile("ml/train", absl::Milliseconds(3), absl::OkStatus(), ordered);
  metrics_.ObserveReconcile("ml/train", absl::Milliseconds(3), absl::OkStatus(),
                            ordered);  // Ordered again.
  Pass(kCreated + absl::Seconds(12.5), std::nullopt, /*running=*/true);

  Pass(kCreated + absl::Seconds(100),
       GangRestart{FailureCause::kProcessExited, kCreated + absl::Seconds(99), "Failure"});
  ReconcileReport created;
  created.now = kCreated + absl::Seconds(105);
  created.event_reasons = {"Started"};
  metrics_.ObserveReconcile("ml/train", absl::Milliseconds(3), absl::OkStatus(), created);
  Pass(kCreated + absl::Seconds(109), std::nullopt, /*running=*/true);

  std::string text = Text();
  const std::string series = "cohort_operator_job_recovery_stage_seconds";
  const std::string job = R"(cohort_job="train",job_namespace="ml")";
  EXPECT_THAT(text, HasSubstr(series + "_sum{" + job +
                              R"(,restart="in_place",stage="old_processes_gone"} 2)"));
  EXPECT_THAT(text, HasSubstr(series + "_count{" + job +
                              R"(,restart="in_place",stage="old_processes_gone"} 1)"));
  EXPECT_THAT(text,
              HasSubstr(series + "_sum{" + job + R"(,restart="in_place",stage="running"} 3.5)"));
  EXPECT_THAT(text, HasSubstr(series + "_sum{" + job +
                              R"(,restart="recreate",stage="old_processes_gone"} 6)"));
  EXPECT_THAT(text,
              HasSubstr(series + "_sum{" + job + R"(,restart="recreate",stage="running"} 10)"));
  EXPECT_THAT(text, HasSubstr("cohort_operator_job_recovery_seconds_count{" + job + "} 2"));
}

TEST_F(OperatorMetricsTest, SecondFailureBeforeRecoveryKeepsTheFirstClock) {
  metrics_.SetJobPhase("ml/train", Phase::kRunning);
  Pass(kCreated + absl::Seconds(10),
       GangRestart{FailureCause::kProcessExited, kCreated + absl::Seconds(9), "Failure"});
  Pass(kCreated + absl::Seconds(20),
       GangRestart{FailureCause::kProcessExited, kCreated + absl::Seconds(19), "Failure"});
  Pass(kCreated + absl::Seconds(30), std::nullopt, /*running=*/true);
  std::string text = Text();
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(cohort_operator_job_recovery_seconds_sum{cohort_job="train",job_namespace="ml"} 21)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(cohort_operator_job_restarts_total{cause="crash",cohort_job="train",job_namespace="ml"} 2)"));
  // Seen Running before this replica's first pass: not a new job, no time to running.
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(cohort_operator_job_time_to_running_seconds_count{cohort_job="train",job_namespace="ml"} 0)"));
}

// 1 while the job's Hung condition is True; one count per hang named (its HangDetected Event);
// a restart after it counted with cause "hung".
TEST_F(OperatorMetricsTest, HungGaugeAndHangsCounterPerJob) {
  metrics_.SetJobPhase("ml/train", Phase::kRunning);
  const std::string job = R"(cohort_job="train",job_namespace="ml")";
  EXPECT_THAT(Text(), HasSubstr("cohort_operator_job_hung{" + job + "} 0"));
  EXPECT_THAT(Text(), HasSubstr("cohort_operator_job_hangs_total{" + job + "} 0"));
  auto pass = [&](bool hung, bool detected, std::optional<GangRestart> restart = std::nullopt) {
    ReconcileReport report;
    report.now = kCreated + absl::Seconds(50);
    report.phase = restart ? Phase::kRestarting : Phase::kRunning;
    report.hung = hung;
    if (detected) report.event_reasons.push_back("HangDetected");
    report.restart = restart;
    metrics_.ObserveReconcile("ml/train", absl::Milliseconds(3), absl::OkStatus(), report);
  };
  pass(true, true);
  EXPECT_THAT(Text(), HasSubstr("cohort_operator_job_hung{" + job + "} 1"));
  pass(true, false);  // The same hang: not counted again.
  metrics_.ObserveReconcile("ml/train", absl::Milliseconds(3), absl::AbortedError("conflict"),
                            ReconcileReport{});
  EXPECT_THAT(Text(), HasSubstr("cohort_operator_job_hung{" + job + "} 1"))
      << "a failed pass changes nothing";
  pass(true, false, GangRestart{FailureCause::kHung, kCreated + absl::Seconds(20), "Failure"});
  pass(false, false);  // The next attempt runs.
  std::string text = Text();
  EXPECT_THAT(text, HasSubstr("cohort_operator_job_hung{" + job + "} 0"));
  EXPECT_THAT(text, HasSubstr("cohort_operator_job_hangs_total{" + job + "} 1"));
  EXPECT_THAT(text, HasSubstr("cohort_operator_job_restarts_total{cause=\"hung\"," + job + "} 1"));
  metrics_.SetJobPhase("ml/train", std::nullopt);
  EXPECT_THAT(Text(), Not(HasSubstr("cohort_operator_job_hung{")));
}

TEST_F(OperatorMetricsTest, DeletedJobLeavesNoSeries) {
  metrics_.SetJobPhase("ml/train", Phase::kRunning);
  Pass(kCreated + absl::Seconds(10),
       GangRestart{FailureCause::kOutOfMemory, kCreated + absl::Seconds(9), "Failure"});
  metrics_.SetJobPhase("ml/other", Phase::kPending);
  metrics_.SetJobPhase("ml/train", std::nullopt);
  std::string text = Text();
  EXPECT_THAT(text, Not(HasSubstr(R"(cohort_job="train")")));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(cohort_operator_job_phase{cohort_job="other",job_namespace="ml",phase="Pending"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(cohort_operator_jobs{phase="Running"} 0)"));
  EXPECT_THAT(text, HasSubstr(R"(cohort_operator_jobs{phase="Pending"} 1)"));
}

// An elastic job's replica groups, running and wanted, from each pass; gone with the job; none
// for a job that is not elastic.
TEST_F(OperatorMetricsTest, ElasticJobsReplicaGroups) {
  metrics_.SetJobPhase("ml/train", Phase::kRunning);
  const std::string job = R"(cohort_job="train",job_namespace="ml")";
  ReconcileReport report;
  report.now = kCreated + absl::Seconds(50);
  report.phase = Phase::kRunning;
  metrics_.ObserveReconcile("ml/train", absl::Milliseconds(3), absl::OkStatus(), report);
  EXPECT_THAT(Text(), Not(HasSubstr("cohort_operator_job_replica_groups{")));
  report.replica_groups = std::pair{3, 4};
  metrics_.ObserveReconcile("ml/train", absl::Milliseconds(3), absl::OkStatus(), report);
  EXPECT_THAT(Text(), HasSubstr("cohort_operator_job_replica_groups{" + job + "} 3"));
  EXPECT_THAT(Text(), HasSubstr("cohort_operator_job_desired_replica_groups{" + job + "} 4"));
  report.replica_groups = std::pair{4, 4};
  metrics_.ObserveReconcile("ml/train", absl::Milliseconds(3), absl::OkStatus(), report);
  EXPECT_THAT(Text(), HasSubstr("cohort_operator_job_replica_groups{" + job + "} 4"));
  metrics_.SetJobPhase("ml/train", std::nullopt);
  EXPECT_THAT(Text(), Not(HasSubstr("cohort_operator_job_replica_groups{")));
}

}  // namespace
}  // namespace cohort::op
