// The same failure has the same `cause` label on every metric: the sidecar's
// cohort_task_failures_total (the cause a rank was told) and the operator's
// cohort_operator_job_restarts_total (the cause it reads back from a follower's termination
// message, the line libdist's default handler wrote).
#include <string>

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/failure_cause.h"
#include "common/termination_message.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/reconciler/job_decision.h"
#include "sidecar/metrics/sidecar_metrics.h"

namespace cohort {
namespace {

TEST(FailureCauseLabels, SidecarAndOperatorNameEachCauseAlike) {
  for (const FailureCauseInfo& info : kFailureCauses) {
    auto registry = std::make_shared<prometheus::Registry>();
    sidecar::SidecarMetrics sidecar(*registry, 1);
    sidecar.CountFailure(info.cause);
    const std::string text = prometheus::TextSerializer().Serialize(registry->Collect());
    EXPECT_THAT(text, ::testing::HasSubstr(absl::StrCat("cohort_task_failures_total{cause=\"",
                                                        info.label, "\",rank=\"1\"} 1")))
        << info.label;

    op::ObservedPod follower;
    follower.trainer_exit_code = kPeerFailureExitCode;
    follower.trainer_message = FormatPeerFailureLine("rank 0 (pod demo-0) failed", info.cause);
    EXPECT_EQ(op::RestartCause(follower), info.cause) << info.words;
  }
}

}  // namespace
}  // namespace cohort
