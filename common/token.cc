#include "common/token.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/env.h"

namespace cohort {

absl::StatusOr<std::string> LoadToken(absl::string_view file) {
  std::string path(file);
  if (path.empty()) path = env::Get(env::kTokenFile).value_or("");
  if (!path.empty()) {
    std::ifstream in(path);
    if (!in) {
      int err = errno;
      std::string msg =
          absl::StrCat("cannot read the job token file '", path, "': ", std::strerror(err),
                       "; check COHORT_TOKEN_FILE / --token-file and the mount");
      return err == EACCES ? absl::PermissionDeniedError(msg) : absl::NotFoundError(msg);
    }
    std::stringstream ss;
    ss << in.rdbuf();
    std::string token(absl::StripAsciiWhitespace(ss.str()));
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the job token file '", path, "' is empty; write the token into it"));
    }
    return token;
  }
  return std::string(absl::StripAsciiWhitespace(env::Get(env::kToken).value_or("")));
}

bool TokenMatches(absl::string_view presented_header, absl::string_view expected_token) {
  absl::string_view presented = presented_header;
  if (!absl::ConsumePrefix(&presented, kTokenMetadataPrefix)) return false;
  if (presented.size() != expected_token.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < presented.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i] ^ expected_token[i]);
  }
  return diff == 0;
}

std::string GenerateToken() {
  absl::BitGen gen;
  std::string bytes(32, '\0');
  for (char& c : bytes) c = static_cast<char>(absl::Uniform<uint8_t>(gen));
  return absl::BytesToHexString(bytes);
}

}  // namespace cohort
