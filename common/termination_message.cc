#include "common/termination_message.h"

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"

namespace cohort {
namespace {

constexpr absl::string_view kMarker = "[cause: ";

}  // namespace

std::string FormatPeerFailureLine(absl::string_view message, FailureCause cause) {
  return absl::StrCat(
      "cohort: the job failed: ", message, " ", kMarker, InfoOf(cause).words,
      "]. Exiting with code ", kPeerFailureExitCode,
      " (fate sharing; set dist::Options::on_peer_failure to handle failures yourself)\n");
}

std::optional<FailureCause> ParsePeerFailureCause(absl::string_view text) {
  const size_t at = text.rfind(kMarker);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view words = text.substr(at + kMarker.size());
  const size_t end = words.find(']');
  if (end == absl::string_view::npos) return std::nullopt;
  return FailureCauseFromWords(words.substr(0, end));
}

}  // namespace cohort
