// Hot spares (spare_slots.h): which ready spare takes which lost slot, as a table.

#include "operator/reconciler/spare_slots.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace cohort::op {
namespace {

struct Row {
  std::string name;
  std::vector<LostSlot> lost;
  std::vector<ReadySpare> spares;
  bool same_domain_required = false;
  std::string assignments;  // "1=spare-a 3=spare-b"
  std::string unassigned;   // "2: no spare is ready"
};

std::string Format(const SlotPlan& plan, bool assigned) {
  std::vector<std::string> parts;
  if (assigned) {
    for (const auto& a : plan.assignments) parts.push_back(absl::StrCat(a.pod_index, "=", a.spare));
    return absl::StrJoin(parts, " ");
  }
  for (const auto& u : plan.unassigned) parts.push_back(absl::StrCat(u.pod_index, ": ", u.why));
  return absl::StrJoin(parts, "; ");
}

class SpareSlotsTest : public ::testing::TestWithParam<Row> {};

TEST_P(SpareSlotsTest, Table) {
  const Row& row = GetParam();
  const SlotPlan plan = PlanSpareSlots(row.lost, row.spares, row.same_domain_required);
  EXPECT_EQ(Format(plan, true), row.assignments);
  EXPECT_EQ(Format(plan, false), row.unassigned);
}

INSTANTIATE_TEST_SUITE_P(
    Plan, SpareSlotsTest,
    ::testing::Values(
        Row{"OneLostSlot_TheFirstSpareTakesIt",
            {{1, ""}},
            {{"spare-a", ""}, {"spare-b", ""}},
            false,
            "1=spare-a",
            ""},
        Row{"SlotsByPodIndex_SparesInTheirOrder",
            {{3, ""}, {1, ""}},
            {{"spare-a", ""}, {"spare-b", ""}},
            false,
            "1=spare-a 3=spare-b",
            ""},
        Row{"MoreLostThanSpares_TheRestWaitForReplacements",
            {{1, ""}, {2, ""}},
            {{"spare-a", ""}},
            false,
            "1=spare-a",
            "2: no spare is ready"},
        Row{"NoSpareReady_EveryLostSlotWaits", {{2, ""}}, {}, false, "", "2: no spare is ready"},
        Row{"RankZerosSlot_NeverASpare_TheGangIsRecreated",
            {{0, ""}, {1, ""}},
            {{"spare-a", ""}, {"spare-b", ""}},
            false,
            "1=spare-a",
            "0: rank 0's pod hosts the coordination service and the attempt hub: the gang is "
            "recreated"},
        Row{"SameDomainPreferred_NeighboursStayNeighbours",
            {{1, "rack-2"}},
            {{"spare-a", "rack-1"}, {"spare-b", "rack-2"}},
            false,
            "1=spare-b",
            ""},
        Row{"SameDomainPreferred_NoneThere_AnySpare",
            {{1, "rack-3"}},
            {{"spare-a", "rack-1"}},
            false,
            "1=spare-a",
            ""},
        Row{"SameDomainRequired_NoneThere_WaitsSayingWhich",
            {{1, "rack-3"}},
            {{"spare-a", "rack-1"}},
            true,
            "",
            "1: no ready spare is in its topology domain, rack-3"},
        Row{"SameDomainRequired_DomainUnknown_Waits",
            {{1, ""}},
            {{"spare-a", "rack-1"}},
            true,
            "",
            "1: its topology domain is not known, and the job requires one"},
        Row{"SameDomainRequired_EachSlotItsOwnDomain",
            {{1, "rack-1"}, {2, "rack-2"}},
            {{"spare-b", "rack-2"}, {"spare-a", "rack-1"}},
            true,
            "1=spare-a 2=spare-b",
            ""}),
    [](const ::testing::TestParamInfo<Row>& info) { return info.param.name; });

}  // namespace
}  // namespace cohort::op
