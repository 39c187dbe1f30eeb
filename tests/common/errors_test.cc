#include "common/errors.h"

#include <vector>

#include "gtest/gtest.h"

namespace cohort {
namespace {

TEST(FormatRankList, ShortList_AllShown) {
  std::vector<int32_t> ranks = {1, 4};
  EXPECT_EQ(FormatRankList(ranks), "1, 4");
}

TEST(FormatRankList, LongList_CappedWithCount) {
  std::vector<int32_t> ranks = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(FormatRankList(ranks), "1, 2, 3 and 3 more");
}

}  // namespace
}  // namespace cohort
