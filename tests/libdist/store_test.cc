// libdist's Store refuses keys and barrier ids that are not UTF-8, naming them: sent, they would
// make the request unparsable on the other side (proto3 strings) and come back as gRPC's
// deserialization error, naming nothing.

#include "libdist/src/store.h"

#include "common/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordination/client/fake_job_client.h"

namespace dist::internal {
namespace {

using ::testing::HasSubstr;

TEST(Utf8, WellFormedOnly) {
  EXPECT_TRUE(cohort::IsValidUtf8(""));
  EXPECT_TRUE(cohort::IsValidUtf8("plain/key"));
  EXPECT_TRUE(cohort::IsValidUtf8("r\xc3\xa9sum\xc3\xa9/\xe2\x82\xac/\xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_FALSE(cohort::IsValidUtf8("\xff"));
  EXPECT_FALSE(cohort::IsValidUtf8("a\x80"));             // a stray continuation byte
  EXPECT_FALSE(cohort::IsValidUtf8("\xc3"));              // cut short
  EXPECT_FALSE(cohort::IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(cohort::IsValidUtf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(cohort::IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
}

TEST(Store, NonUtf8KeyOrBarrierId_InvalidArgumentNamingIt_NothingSent) {
  cohort::coordination::testing::FakeJob job(1);
  Store store(&job.client(0));
  const std::string bad = "ckpt/\xff\xfe";
  for (absl::Status s :
       {store.Set(bad, "v"), store.TryGet(bad).status(), store.Get(bad, absl::Now()).status(),
        store.Add(bad, 1).status(), store.Dir(bad).status(), store.Delete(bad),
        store.Barrier(bad, absl::Seconds(1), {}), store.CancelBarrier(bad)}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("\"ckpt/\\xff\\xfe\" is not UTF-8 text")) << s;
  }
  EXPECT_EQ(store.TryGet("ckpt").status().code(), absl::StatusCode::kNotFound)
      << "nothing was written under the prefix";
  EXPECT_TRUE(store.Set("ckpt/\xc3\xa9", "v").ok()) << "UTF-8 beyond ASCII is fine";
}

}  // namespace
}  // namespace dist::internal
