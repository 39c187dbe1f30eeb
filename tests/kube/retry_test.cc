#include "kube/retry.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kube/fake_kube_client.h"

namespace cohort::kube {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

TEST(RetryOnConflictTest, RetriesConflictsOnlyAndReturnsTheFirstOtherResult) {
  int calls = 0;
  EXPECT_TRUE(RetryOnConflict([&] {
                return ++calls < 3 ? absl::AbortedError("conflict") : absl::OkStatus();
              }).ok());
  EXPECT_EQ(calls, 3);
  calls = 0;
  EXPECT_TRUE(absl::IsNotFound(RetryOnConflict([&] {
    ++calls;
    return absl::NotFoundError("gone");
  })));
  EXPECT_EQ(calls, 1) << "only a conflict is tried again";
}

TEST(RetryOnConflictTest, GivesUpAfterTheAttemptsWithTheLastConflict) {
  int calls = 0;
  absl::Status s =
      RetryOnConflict([&] { return absl::AbortedError(absl::StrCat("conflict ", ++calls)); });
  EXPECT_EQ(calls, kConflictAttempts);
  EXPECT_EQ(s, absl::AbortedError(absl::StrCat("conflict ", kConflictAttempts)));
  calls = 0;
  RetryOnConflict([&] { return absl::AbortedError(absl::StrCat("conflict ", ++calls)); }, 2)
      .IgnoreError();
  EXPECT_EQ(calls, 2);
}

class UpdateStatusWithTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        client_.Create(kNodes, "", {{"metadata", {{"name", "n"}}}, {"status", {{"phase", "a"}}}})
            .ok());
  }
  testing::FakeKubeClient client_;
};

TEST_F(UpdateStatusWithTest, ReadsAgainWhenAnotherWriterCameInBetween) {
  int reads = 0;
  absl::Status s = UpdateStatusWith(&client_, kNodes, "", "n", [&](json& node) {
    if (++reads < 3)
      client_.Modify(kNodes, "", "n", [&](json& n) { n["status"]["other"] = reads; });
    node["status"]["phase"] = "b";
    return true;
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(reads, 3);
  const json stored = client_.Object(kNodes, "", "n");
  EXPECT_EQ(stored["status"]["phase"], "b");
  EXPECT_EQ(stored["status"]["other"], 2) << "the other writer's change was read, not overwritten";
}

TEST_F(UpdateStatusWithTest, NothingToWriteWritesNothing) {
  const std::string version = client_.Object(kNodes, "", "n")["metadata"]["resourceVersion"];
  EXPECT_TRUE(UpdateStatusWith(&client_, kNodes, "", "n", [](json&) { return false; }).ok());
  EXPECT_EQ(client_.Object(kNodes, "", "n")["metadata"]["resourceVersion"], version);
}

TEST_F(UpdateStatusWithTest, AnObjectThatKeepsChangingIsAbortedNamingIt) {
  int changes = 0;
  absl::Status s = UpdateStatusWith(&client_, kNodes, "", "n", [&](json& node) {
    client_.Modify(kNodes, "", "n", [&](json& n) { n["status"]["other"] = ++changes; });
    node["status"]["phase"] = "b";
    return true;
  });
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("nodes n kept changing"));
}

TEST_F(UpdateStatusWithTest, AMissingObjectIsNotFound) {
  EXPECT_TRUE(
      absl::IsNotFound(UpdateStatusWith(&client_, kNodes, "", "gone", [](json&) { return true; })));
}

}  // namespace
}  // namespace cohort::kube
