#include "common/files.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temporary_directory.h"

namespace cohort {
namespace {

TEST(Files, WriteAtomicallyThenRead_RoundTrips_NoTemporaryLeft) {
  testing::TemporaryDirectory dir("files-test");
  const std::string path = dir.path() + "/status.json";
  ASSERT_TRUE(WriteFileAtomically(path, "{\"steps\": 3}\n").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "{\"steps\": 4}\n").ok());
  EXPECT_EQ(ReadFile(path), "{\"steps\": 4}\n");
  EXPECT_EQ(ReadFile(path + ".tmp"), std::nullopt);
}

TEST(Files, MissingDirectory_ReadIsNothing_WriteNamesTheFile) {
  EXPECT_EQ(ReadFile("/nonexistent-dir/x"), std::nullopt);
  absl::Status s = WriteFileAtomically("/nonexistent-dir/x", "text");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("cannot write /nonexistent-dir/x.tmp"));
}

}  // namespace
}  // namespace cohort
