#include "common/token.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace cohort {
namespace {

TEST(TokenMatches, RequiresBearerPrefixAndExactToken) {
  EXPECT_TRUE(TokenMatches("Bearer abc", "abc"));
  EXPECT_FALSE(TokenMatches("abc", "abc"));
  EXPECT_FALSE(TokenMatches("Bearer abd", "abc"));
  EXPECT_FALSE(TokenMatches("Bearer abcd", "abc"));
}

TEST(LoadToken, FromFile_StripsWhitespace) {
  std::string path = testing::TempDir() + "/token";
  std::ofstream(path) << "  s3cret\n";
  EXPECT_EQ(*LoadToken(path), "s3cret");
}

TEST(LoadToken, MissingFile_NotFoundNamesPath) {
  absl::StatusOr<std::string> t = LoadToken("/nonexistent/cohort-token");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("/nonexistent/cohort-token"), std::string::npos);
}

TEST(LoadToken, FromEnvironment) {
  unsetenv("COHORT_TOKEN_FILE");
  setenv("COHORT_TOKEN", "envtoken", 1);
  EXPECT_EQ(*LoadToken(), "envtoken");
  unsetenv("COHORT_TOKEN");
  EXPECT_EQ(*LoadToken(), "");
}

TEST(GenerateToken, RandomHex) {
  std::string a = GenerateToken(), b = GenerateToken();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace cohort
