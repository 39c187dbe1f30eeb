#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace cohort {

// The per-job token that every RPC carries, as `authorization: Bearer <token>` metadata.
inline constexpr char kTokenMetadataKey[] = "authorization";
inline constexpr char kTokenMetadataPrefix[] = "Bearer ";

// Loads the job token: from `file` when non-empty, else COHORT_TOKEN_FILE, else COHORT_TOKEN.
// Returns "" when none is configured (authentication off). Surrounding whitespace is stripped.
// Errors: NotFound / PermissionDenied when the file cannot be read, InvalidArgument when empty.
absl::StatusOr<std::string> LoadToken(absl::string_view file = "");

// Constant-time comparison of a presented `authorization` metadata value with the expected token.
bool TokenMatches(absl::string_view presented_header, absl::string_view expected_token);

// 32 random bytes, hex encoded: a fresh job token (for the local launcher and tests).
std::string GenerateToken();

}  // namespace cohort
