// MakeSharedDirectories (common/shared_dir.h): the directory and its parents up to the given one
// open to every user, nothing above it touched.

#include "common/shared_dir.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace cohort {
namespace {

namespace fs = std::filesystem;

mode_t ModeOf(const fs::path& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
}

TEST(MakeSharedDirectories, OpensTheDirectoryAndItsParentsUpToTop_NotAbove) {
  char tmpl[] = "/tmp/cohort-shared-dir-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path base = tmpl;
  fs::permissions(base, fs::perms(0700));
  const fs::path top = base / "dumps";
  const fs::path dir = top / "attempt-0" / "rank-3";
  ASSERT_TRUE(MakeSharedDirectories(dir.string(), top.string()));
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_EQ(ModeOf(dir), 0777u);
  EXPECT_EQ(ModeOf(dir.parent_path()), 0777u);
  EXPECT_EQ(ModeOf(top), 0777u);
  EXPECT_EQ(ModeOf(base), 0700u) << "above `top`: left as it was";
  std::ofstream((base / "file").string()) << "x";
  EXPECT_FALSE(MakeSharedDirectories((base / "file" / "sub").string(), base.string()))
      << "a file in the way";
  fs::remove_all(base);
}

}  // namespace
}  // namespace cohort
