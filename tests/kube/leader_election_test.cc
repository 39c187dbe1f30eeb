#include "kube/leader_election.h"

#include "gtest/gtest.h"
#include "tests/kube/fake_kube_client.h"

namespace cohort::kube {
namespace {

using json = nlohmann::json;
using testing::FakeKubeClient;

LeaderElectionOptions Options(const std::string& identity) {
  LeaderElectionOptions o;
  o.ns = "cohort-system";
  o.name = "cohort-operator";
  o.identity = identity;
  return o;  // lease 15 s, renew deadline 10 s, retry 2 s.
}

class LeaderElectionTest : public ::testing::Test {
 protected:
  json Lease() { return kube_.Object(kLeases, "cohort-system", "cohort-operator"); }
  bool Leads(LeaderElector& e) {
    absl::StatusOr<bool> r = e.TryAcquireOrRenew();
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && *r;
  }

  FakeKubeClient kube_;
  FakeClock clock_a_, clock_b_;  // Each replica's own clock: they need not agree.
  LeaderElector a_{&kube_, &clock_a_, Options("a")};
  LeaderElector b_{&kube_, &clock_b_, Options("b")};
};

TEST_F(LeaderElectionTest, FirstCandidateCreatesTheLeaseAndOthersWait) {
  EXPECT_TRUE(Leads(a_));
  EXPECT_EQ(Lease()["spec"]["holderIdentity"], "a");
  EXPECT_EQ(Lease()["spec"]["leaseDurationSeconds"], 15);
  EXPECT_FALSE(Leads(b_));
  EXPECT_TRUE(Leads(a_)) << "the holder renews";
}

TEST_F(LeaderElectionTest, RenewalsKeepTheStandbyOut) {
  ASSERT_TRUE(Leads(a_));
  ASSERT_FALSE(Leads(b_));
  for (int i = 0; i < 10; ++i) {
    clock_a_.Advance(absl::Seconds(2));
    clock_b_.Advance(absl::Seconds(2));
    ASSERT_TRUE(Leads(a_));
    ASSERT_FALSE(Leads(b_)) << "after " << 2 * (i + 1) << " s";
  }
}

TEST_F(LeaderElectionTest, StandbyTakesOverOnlyAfterTheLeaseExpiresOnItsOwnClock) {
  ASSERT_TRUE(Leads(a_));
  ASSERT_FALSE(Leads(b_));  // b first sees the record now, by its own clock.
  // a stops renewing (crashed). Its renewTime says nothing to b: a's clock may be skewed.
  clock_a_.Advance(absl::Hours(5));
  clock_b_.Advance(absl::Seconds(14));
  EXPECT_FALSE(Leads(b_));
  clock_b_.Advance(absl::Seconds(1));
  EXPECT_TRUE(Leads(b_));
  EXPECT_EQ(Lease()["spec"]["holderIdentity"], "b");
  EXPECT_EQ(Lease()["spec"]["leaseTransitions"], 1);
  // The old leader, back, finds it lost the Lease.
  EXPECT_FALSE(Leads(a_));
}

// A Lease edited by hand (or written by another program) with fields of the wrong type: read as
// absent, so the candidate takes it over instead of throwing out of the operator.
TEST_F(LeaderElectionTest, MalformedLeaseIsReadAsAbsentNotThrown) {
  for (json spec :
       {json{{"holderIdentity", 5}, {"leaseDurationSeconds", "long"}, {"leaseTransitions", "x"}},
        json("not an object"), json::array()}) {
    (void)kube_.Delete(kLeases, "cohort-system", "cohort-operator");  // the previous round's
    json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", "cohort-operator"}, {"namespace", "cohort-system"}}},
                  {"spec", spec}};
    ASSERT_TRUE(kube_.Create(kLeases, "cohort-system", lease).ok());
    LeaderElector c{&kube_, &clock_a_, Options("c")};
    EXPECT_TRUE(Leads(c)) << spec.dump();
    EXPECT_EQ(Lease()["spec"]["holderIdentity"], "c") << spec.dump();
    EXPECT_TRUE(c.Release().ok()) << spec.dump();
  }
}

TEST_F(LeaderElectionTest, ReleaseHandsOverAtOnce) {
  ASSERT_TRUE(Leads(a_));
  ASSERT_FALSE(Leads(b_));
  ASSERT_TRUE(a_.Release().ok());
  EXPECT_TRUE(Leads(b_)) << "no need to wait out the lease duration";
  EXPECT_TRUE(b_.Release().ok());
  EXPECT_TRUE(a_.Release().ok()) << "releasing a Lease one does not hold changes nothing";
}

TEST_F(LeaderElectionTest, LeaderStepsDownWhenAnotherTookTheLease) {
  ASSERT_TRUE(Leads(a_));
  absl::Notification stop;
  // b takes the Lease (as if a's renewals had not reached the server for a lease duration);
  // a's next renewal finds it gone and RenewBlocking reports the loss.
  clock_b_.Advance(absl::Seconds(1));
  ASSERT_FALSE(Leads(b_));
  clock_b_.Advance(absl::Seconds(15));
  ASSERT_TRUE(Leads(b_));
  clock_a_.set_auto_advance(true);
  EXPECT_FALSE(a_.RenewBlocking(stop));
}

// The API server stops answering: no renewal can succeed, so nobody can tell the leader that it
// lost the Lease. It steps down once renew_deadline (10 s) passed since its last renewal, before
// the lease (15 s) runs out and a standby may take over.
TEST_F(LeaderElectionTest, LeaderStepsDownWhenNoRenewalSucceedsWithinTheRenewDeadline) {
  ASSERT_TRUE(Leads(a_));
  absl::Time renewed = clock_a_.Now();
  kube_.FailEveryCall(absl::UnavailableError("connection refused"));
  clock_a_.set_auto_advance(true);  // Each retry_period wait passes at once.
  absl::Notification stop;
  EXPECT_FALSE(a_.RenewBlocking(stop));
  absl::Duration held = clock_a_.Now() - renewed;
  EXPECT_GT(held, absl::Seconds(10));
  EXPECT_LE(held, absl::Seconds(12)) << "one retry period past the renew deadline at most";
  EXPECT_LE(kube_.calls_made(), 10) << "it gave up after the renew deadline, not later";
}

}  // namespace
}  // namespace cohort::kube
