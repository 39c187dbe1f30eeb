#include "sidecar/coordination/reply_budget.h"

#include <vector>

#include "gtest/gtest.h"

namespace cohort::coordination {
namespace {

TEST(ReplyBudget, UnderCap_RunsAtOnce) {
  ReplyBudget budget(100);
  bool ran = false;
  budget.Admit([&] {
    ran = true;
    budget.Charge(40);
  });
  EXPECT_TRUE(ran);
  EXPECT_EQ(budget.in_flight(), 40u);
}

TEST(ReplyBudget, OverCap_WaitsInOrderUntilReleased) {
  ReplyBudget budget(100);
  std::vector<int> order;
  budget.Admit([&] {
    order.push_back(0);
    budget.Charge(150);  // One reply larger than the cap still goes out.
  });
  for (int i = 1; i <= 3; ++i) {
    budget.Admit([&, i] {
      order.push_back(i);
      budget.Charge(60);
    });
  }
  EXPECT_EQ(order, std::vector<int>({0}));
  EXPECT_EQ(budget.waiting(), 3u);
  budget.Release(150);  // Admits #1 (60 in flight), then #2 (120: over the cap, stop).
  EXPECT_EQ(order, std::vector<int>({0, 1, 2}));
  EXPECT_EQ(budget.waiting(), 1u);
  budget.Release(60);  // 60 in flight: under the cap, so #3 runs.
  EXPECT_EQ(order, std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(budget.waiting(), 0u);
}

TEST(ReplyBudget, NewWorkQueuesBehindWaitingWork) {
  ReplyBudget budget(10);
  std::vector<int> order;
  budget.Admit([&] { budget.Charge(10); order.push_back(0); });
  budget.Admit([&] { budget.Charge(1); order.push_back(1); });
  budget.Release(10);
  budget.Admit([&] { budget.Charge(1); order.push_back(2); });
  EXPECT_EQ(order, std::vector<int>({0, 1, 2}));
}

}  // namespace
}  // namespace cohort::coordination
