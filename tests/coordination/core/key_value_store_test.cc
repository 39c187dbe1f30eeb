#include "coordination/core/key_value_store.h"

#include "coordination/core/error_details.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coordination {
namespace {

TEST(NormalizeKey, CollapsesAndStripsSlashes) {
  EXPECT_EQ(KeyValueStore::NormalizeKey("///a//b/c//"), "a/b/c");
  EXPECT_EQ(KeyValueStore::NormalizeKey("a"), "a");
  EXPECT_EQ(KeyValueStore::NormalizeKey("//"), "");
}

TEST(KeyValueStore, InsertWithoutOverwrite_AlreadyExists) {
  KeyValueStore kv;
  Deferred d;
  ASSERT_TRUE(kv.Insert("k", "1", false, &d).ok());
  absl::Status s = kv.Insert("/k/", "2", false, &d);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(*kv.Get("k"), "1");
  ASSERT_TRUE(kv.Insert("k", "2", true, &d).ok());
  EXPECT_EQ(*kv.Get("k"), "2");
}

TEST(KeyValueStore, ValueOverLimit_InvalidArgumentAndNothingStored) {
  KeyValueStore kv;
  Deferred d;
  absl::Status s = kv.Insert("big", std::string(KeyValueStore::kMaxValueBytes + 1, 'x'), false, &d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("1 MiB"), std::string::npos);
  EXPECT_FALSE(kv.Get("big").has_value());
}

// The JAX port's store, as XLA's: any size gRPC delivered, and "" is a key like any other.
TEST(KeyValueStore, NoLimits_BigValuesLongKeysAndTheEmptyKey) {
  KeyValueStore kv;
  Deferred d;
  const std::string long_key(KeyValueStore::kMaxKeyBytes + 1, 'k');
  EXPECT_TRUE(kv.Insert("big", std::string(2 * KeyValueStore::kMaxValueBytes, 'x'), false, &d,
                        KeyValueStore::kNoLimits)
                  .ok());
  EXPECT_TRUE(kv.Insert(long_key, "v", false, &d, KeyValueStore::kNoLimits).ok());
  EXPECT_TRUE(kv.Insert("/", "root", false, &d, KeyValueStore::kNoLimits).ok());
  EXPECT_EQ(*kv.Get(""), "root");
  EXPECT_EQ(kv.Insert("", "again", false, &d, KeyValueStore::kNoLimits).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(kv.Insert("", "x", false, &d).code(), absl::StatusCode::kInvalidArgument)
      << "Cohort's protocol refuses the empty key";
  EXPECT_EQ(kv.Delete("", KeyValueStore::kNoLimits), 1u)
      << "the empty key alone, not the whole store";
  EXPECT_FALSE(kv.Get("").has_value());
  EXPECT_TRUE(kv.Get("big").has_value());
}

TEST(KeyValueStore, Refusals_CarryTheDetailsOtherProtocolsWordThemFrom) {
  KeyValueStore kv;
  Deferred d;
  ASSERT_TRUE(kv.Insert("k", "text", false, &d).ok());
  std::optional<ErrorDetails> exists = DetailsOf(kv.Insert("//k", "2", false, &d));
  ASSERT_TRUE(exists.has_value());
  EXPECT_EQ(exists->kind, ErrorKind::kKeyExists);
  EXPECT_EQ(exists->key, "k");
  std::optional<ErrorDetails> text = DetailsOf(kv.Increment("k", 1, &d).status());
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(text->kind, ErrorKind::kNotAnInteger);
  EXPECT_EQ(text->value, "text");
}

TEST(KeyValueStore, GetDir_ReturnsOnlyEntriesBelowDirectory) {
  KeyValueStore kv;
  Deferred d;
  for (const char* k : {"a/1", "a/2", "a/b/3", "ab/4", "a"})
    ASSERT_TRUE(kv.Insert(k, k, false, &d).ok());
  KeyValueStore::Entries dir = kv.GetDir("/a/");
  ASSERT_EQ(dir.size(), 3u);
  EXPECT_EQ(dir[0].first, "a/1");
  EXPECT_EQ(dir[2].first, "a/b/3");
}

TEST(KeyValueStore, Delete_RemovesKeyAndDirectory) {
  KeyValueStore kv;
  Deferred d;
  for (const char* k : {"a", "a/1", "a/b/2", "ab"}) ASSERT_TRUE(kv.Insert(k, "v", false, &d).ok());
  EXPECT_EQ(kv.Delete("a"), 3u);
  EXPECT_EQ(kv.size(), 1u);
  EXPECT_TRUE(kv.Get("ab").has_value());
}

TEST(KeyValueStore, Increment_StartsAtZeroAndRejectsNonIntegers) {
  KeyValueStore kv;
  Deferred d;
  EXPECT_EQ(*kv.Increment("n", 5, &d), 5);
  EXPECT_EQ(*kv.Increment("n", -2, &d), 3);
  EXPECT_EQ(*kv.Get("n"), "3");
  ASSERT_TRUE(kv.Insert("s", "abc", false, &d).ok());
  EXPECT_EQ(kv.Increment("s", 1, &d).status().code(), absl::StatusCode::kInvalidArgument);
}

// Found by tests/fuzz (coordination_service): the sum was computed with signed overflow.
TEST(KeyValueStore, Increment_Overflow_InvalidArgumentValueUnchanged) {
  KeyValueStore kv;
  Deferred d;
  ASSERT_TRUE(kv.Insert("n", "9223372036854775807", false, &d).ok());
  absl::StatusOr<int64_t> up = kv.Increment("n", 1, &d);
  EXPECT_EQ(up.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(up.status().message()), ::testing::HasSubstr("overflows"));
  EXPECT_EQ(*kv.Get("n"), "9223372036854775807");
  ASSERT_TRUE(kv.Insert("m", "-9223372036854775808", false, &d).ok());
  EXPECT_EQ(kv.Increment("m", -1, &d).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*kv.Increment("m", 9223372036854775807, &d), -1);
}

TEST(KeyValueStore, Waiter_WokenByInsertAfterLockReleased) {
  KeyValueStore kv;
  std::optional<absl::StatusOr<std::string>> got;
  kv.AddWaiter(1, "k", absl::InfiniteFuture(), [&](absl::StatusOr<std::string> v) { got = v; });
  {
    Deferred d;
    ASSERT_TRUE(kv.Insert("k", "v", false, &d).ok());
    EXPECT_FALSE(got.has_value());  // Deferred, not inline.
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(**got, "v");
  EXPECT_EQ(kv.num_waiters(), 0u);
}

TEST(KeyValueStore, Waiter_ExpiresWithDeadlineExceeded) {
  KeyValueStore kv;
  absl::Time t0 = absl::FromUnixSeconds(100);
  std::optional<absl::StatusOr<std::string>> got;
  kv.AddWaiter(1, "k", t0 + absl::Seconds(1), [&](absl::StatusOr<std::string> v) { got = v; });
  {
    Deferred d;
    kv.ExpireWaiters(t0, &d);
  }
  EXPECT_FALSE(got.has_value());
  {
    Deferred d;
    kv.ExpireWaiters(t0 + absl::Seconds(1), &d);
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(got->status().message().find("'k'"), std::string::npos);
}

}  // namespace
}  // namespace cohort::coordination
