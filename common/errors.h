#pragma once

#include <cstdint>
#include <string>

#include "absl/types/span.h"

namespace cohort {

// "1, 4, 7 and 12 more": a list of ranks capped so that a failure at 10,000 tasks stays one
// readable line.
std::string FormatRankList(absl::Span<const int32_t> ranks, size_t max_shown = 3);

}  // namespace cohort
