// How the launchers share out the CPUs among the processes they start.

#include "launcher/cpu_binding.h"

#include <sched.h>
#include <stdlib.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CpuShare, EvenSplit_ContiguousBlocksInOrder) {
  const std::vector<int> cpus = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_THAT(CpuShare(cpus, 0, 4), ElementsAre(0, 1));
  EXPECT_THAT(CpuShare(cpus, 3, 4), ElementsAre(6, 7));
  EXPECT_THAT(CpuShare(cpus, 5, 8), ElementsAre(5));
}

TEST(CpuShare, UnevenSplit_TheFirstSharesOneLarger) {
  const std::vector<int> cpus = {0, 1, 2, 3, 4};
  EXPECT_THAT(CpuShare(cpus, 0, 2), ElementsAre(0, 1, 2));
  EXPECT_THAT(CpuShare(cpus, 1, 2), ElementsAre(3, 4));
}

TEST(CpuShare, PodCpusetWithGaps_SharesOfTheAllowedCpusOnly) {
  const std::vector<int> cpus = {4, 5, 12, 13};  // A pod's cpuset.
  EXPECT_THAT(CpuShare(cpus, 1, 2), ElementsAre(12, 13));
}

TEST(CpuShare, MoreProcessesThanCpus_RoundRobinOneEach) {
  const std::vector<int> cpus = {0, 1};
  EXPECT_THAT(CpuShare(cpus, 0, 4), ElementsAre(0));
  EXPECT_THAT(CpuShare(cpus, 1, 4), ElementsAre(1));
  EXPECT_THAT(CpuShare(cpus, 2, 4), ElementsAre(0));
  EXPECT_THAT(CpuShare(cpus, 3, 4), ElementsAre(1));
}

TEST(CpuShare, NothingKnown_NoBinding) { EXPECT_TRUE(CpuShare({}, 0, 2).empty()); }

TEST(AllowedCpus, MatchesTheAffinityMask) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(static_cast<int>(AllowedCpus().size()), CPU_COUNT(&set));
}

TEST(DescribeCpus, RangesAndSingles) {
  EXPECT_EQ(DescribeCpus({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
  EXPECT_EQ(DescribeCpus({}), "");
}

TEST(CpuBind, ParsesTheTwoValuesAndNamesTheVariableOtherwise) {
  EXPECT_EQ(*ParseCpuBind("none"), CpuBind::kNone);
  EXPECT_EQ(*ParseCpuBind("cores"), CpuBind::kCores);
  absl::StatusOr<CpuBind> bad = ParseCpuBind("core");
  ASSERT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(bad.status().message(),
              HasSubstr("COHORT_CPU_BIND='core' is not one of none, cores"));
}

TEST(CpuBind, EnvironmentOverridesTheFallback) {
  unsetenv("COHORT_CPU_BIND");
  EXPECT_EQ(*CpuBindFromEnvironment(CpuBind::kCores), CpuBind::kCores);
  setenv("COHORT_CPU_BIND", "none", 1);
  EXPECT_EQ(*CpuBindFromEnvironment(CpuBind::kCores), CpuBind::kNone);
  setenv("COHORT_CPU_BIND", "sockets", 1);
  EXPECT_FALSE(CpuBindFromEnvironment(CpuBind::kCores).ok());
  unsetenv("COHORT_CPU_BIND");
}

}  // namespace
}  // namespace cohort
