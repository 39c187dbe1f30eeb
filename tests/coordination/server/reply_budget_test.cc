#include "coordination/server/reply_budget.h"

#include <vector>

#include "gtest/gtest.h"

namespace cohort::coordination {
namespace {

using Charge = ReplyBudget::Charge;

TEST(ReplyBudget, UnderCap_RunsAtOnce) {
  auto budget = ReplyBudget::Create(100);
  Charge charge;
  budget->Admit([&] { charge = budget->Take(40); });
  EXPECT_EQ(charge.bytes(), 40u);
  EXPECT_EQ(budget->in_flight(), 40u);
  charge.Reset();
  EXPECT_EQ(budget->in_flight(), 0u);
}

TEST(ReplyBudget, OverCap_WaitsInOrderUntilReleased) {
  auto budget = ReplyBudget::Create(100);
  std::vector<int> order;
  std::vector<Charge> charges(4);
  budget->Admit([&] {
    order.push_back(0);
    charges[0] = budget->Take(150);  // One reply larger than the cap still goes out.
  });
  for (int i = 1; i <= 3; ++i) {
    budget->Admit([&, i] {
      order.push_back(i);
      charges[i] = budget->Take(60);
    });
  }
  EXPECT_EQ(order, std::vector<int>({0}));
  EXPECT_EQ(budget->waiting(), 3u);
  charges[0].Reset();  // Admits #1 (60 in flight), then #2 (120: over the cap, stop).
  EXPECT_EQ(order, std::vector<int>({0, 1, 2}));
  EXPECT_EQ(budget->waiting(), 1u);
  charges[1].Reset();  // 60 in flight: under the cap, so #3 runs.
  EXPECT_EQ(order, std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(budget->waiting(), 0u);
}

// Work admitted while earlier work still waits queues behind it, even when the budget has room
// at that moment. The moment arises when a release frees room and runs the waiting work one by
// one: new work arriving then (here from inside the first released item, as a concurrent
// Admit on another thread would) must not overtake the items still queued.
TEST(ReplyBudget, NewWorkQueuesBehindWaitingWork_EvenWithRoom) {
  auto budget = ReplyBudget::Create(10);
  std::vector<int> order;
  std::vector<Charge> charges(4);
  budget->Admit([&] {
    order.push_back(0);
    charges[0] = budget->Take(10);
  });
  budget->Admit([&] {
    order.push_back(1);
    charges[1] = budget->Take(1);  // 1 of 10 in flight: room, but #2 still waits.
    budget->Admit([&] {
      order.push_back(3);
      charges[3] = budget->Take(1);
    });
  });
  budget->Admit([&] {
    order.push_back(2);
    charges[2] = budget->Take(1);
  });
  EXPECT_EQ(budget->waiting(), 2u);
  charges[0].Reset();
  EXPECT_EQ(order, std::vector<int>({0, 1, 2, 3}));
}

TEST(ReplyBudget, MovedCharge_ReleasedOnce) {
  auto budget = ReplyBudget::Create(100);
  Charge a = budget->Take(30);
  Charge b = std::move(a);
  a.Reset();
  EXPECT_EQ(budget->in_flight(), 30u);
  b = budget->Take(5);  // Assigning over a charge releases it.
  EXPECT_EQ(budget->in_flight(), 5u);
}

}  // namespace
}  // namespace cohort::coordination
