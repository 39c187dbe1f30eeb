#include "common/errors.h"

#include "absl/strings/str_cat.h"

namespace cohort {

std::string FormatRankList(absl::Span<const int32_t> ranks, size_t max_shown) {
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < max_shown; ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", ranks[i]);
  }
  if (ranks.size() > max_shown) absl::StrAppend(&out, " and ", ranks.size() - max_shown, " more");
  return out;
}

}  // namespace cohort
