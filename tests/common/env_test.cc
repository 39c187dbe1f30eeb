#include "common/env.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace cohort::env {
namespace {

TEST(ParseDuration, UnitsAndPlainSeconds_Parse) {
  EXPECT_EQ(*ParseDuration("30s"), absl::Seconds(30));
  EXPECT_EQ(*ParseDuration("250ms"), absl::Milliseconds(250));
  EXPECT_EQ(*ParseDuration("5m"), absl::Minutes(5));
  EXPECT_EQ(*ParseDuration("1.5"), absl::Milliseconds(1500));
}

TEST(ParseDuration, Garbage_InvalidArgumentExplainsFormat) {
  absl::StatusOr<absl::Duration> d = ParseDuration("soon");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("30s"), std::string::npos);
  EXPECT_FALSE(ParseDuration("-3s").ok());
}

TEST(GetInt, NotAnInteger_ErrorNamesVariable) {
  setenv("COHORT_TEST_INT", "4x", 1);
  absl::StatusOr<std::optional<int64_t>> v = GetInt("COHORT_TEST_INT");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("COHORT_TEST_INT='4x'"), std::string::npos);
  setenv("COHORT_TEST_INT", "12", 1);
  EXPECT_EQ(GetInt("COHORT_TEST_INT")->value(), 12);
  unsetenv("COHORT_TEST_INT");
  EXPECT_FALSE(GetInt("COHORT_TEST_INT")->has_value());
}

}  // namespace
}  // namespace cohort::env
