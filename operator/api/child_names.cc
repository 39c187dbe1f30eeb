#include "operator/api/child_names.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cohort::op {

std::string ServiceName(const DistributedJob& job) { return job.name; }
std::string SecretName(const DistributedJob& job) { return absl::StrCat(job.name, "-token"); }
std::string PodName(const DistributedJob& job, int32_t rank) {
  return absl::StrCat(job.name, "-", rank);
}
std::string ReplacementPodName(const DistributedJob& job, int32_t rank, int32_t restart_attempt) {
  return absl::StrCat(job.name, "-", rank, "-r", restart_attempt);
}

std::string JobOfPodName(absl::string_view name) {
  // Drops "-<digits>" at the end, after "-r<digits>" when there is one.
  auto drop_number = [](absl::string_view s,
                        absl::string_view prefix) -> std::optional<absl::string_view> {
    const size_t dash = s.rfind('-');
    if (dash == absl::string_view::npos) return std::nullopt;
    absl::string_view number = s.substr(dash + 1);
    if (!absl::ConsumePrefix(&number, prefix) || number.empty() ||
        !std::all_of(number.begin(), number.end(), [](char c) { return absl::ascii_isdigit(c); })) {
      return std::nullopt;
    }
    return s.substr(0, dash);
  };
  if (std::optional<absl::string_view> rest = drop_number(name, "r")) {
    if (std::optional<absl::string_view> job = drop_number(*rest, "")) return std::string(*job);
  }
  std::optional<absl::string_view> job = drop_number(name, "");
  return job ? std::string(*job) : "";
}

std::string JobOfSparePodName(absl::string_view name) {
  size_t digits = name.size();
  while (digits > 0 && absl::ascii_isdigit(name[digits - 1])) --digits;
  if (digits == name.size()) return "";
  absl::string_view rest = name.substr(0, digits);
  if (!absl::ConsumeSuffix(&rest, "-spare") || rest.empty()) return "";
  return std::string(rest);
}

std::string SparePodName(const DistributedJob& job, int32_t sequence) {
  return absl::StrCat(job.name, "-spare", sequence);
}

std::string PodGroupName(const DistributedJob& job, int32_t restart_attempt) {
  const std::string suffix = absl::StrCat("-", restart_attempt);
  if (job.name.size() + suffix.size() <= kMaxLabelLength) return absl::StrCat(job.name, suffix);
  // Too long for a label value: a prefix, then a hash of the whole name, so that two jobs that
  // share the prefix do not share a group.
  const std::string hash =
      absl::StrCat(absl::Hex(std::hash<std::string>()(job.name) & 0xffffff, absl::kZeroPad6));
  return absl::StrCat(job.name.substr(0, kMaxLabelLength - suffix.size() - hash.size() - 1), "-",
                      hash, suffix);
}

}  // namespace cohort::op
