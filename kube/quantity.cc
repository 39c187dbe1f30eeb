#include "kube/quantity.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

namespace cohort::kube {

std::optional<int64_t> ParseQuantity(absl::string_view text) {
  // The number: digits with at most one '.', at least one digit.
  size_t end = 0;
  bool digits = false, dot = false;
  if (end < text.size() && text[end] == '+') ++end;
  for (; end < text.size(); ++end) {
    if (absl::ascii_isdigit(static_cast<unsigned char>(text[end]))) {
      digits = true;
    } else if (text[end] == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!digits) return std::nullopt;
  double number = 0;
  if (!absl::SimpleAtod(text.substr(0, end), &number)) return std::nullopt;
  const absl::string_view suffix = text.substr(end);
  long double scale = 1;
  static constexpr std::pair<absl::string_view, long double> kSuffixes[] = {
      {"", 1},         {"Ki", 0x1p10L}, {"Mi", 0x1p20L}, {"Gi", 0x1p30L},
      {"Ti", 0x1p40L}, {"Pi", 0x1p50L}, {"Ei", 0x1p60L}, {"n", 1e-9L},
      {"u", 1e-6L},    {"m", 1e-3L},    {"k", 1e3L},     {"M", 1e6L},
      {"G", 1e9L},     {"T", 1e12L},    {"P", 1e15L},    {"E", 1e18L},
  };
  bool known = false;
  for (const auto& [name, value] : kSuffixes) {
    if (suffix == name) {
      scale = value;
      known = true;
    }
  }
  if (!known) {
    // A decimal exponent: e or E, an optional sign, digits.
    int exponent = 0;
    if (suffix.size() < 2 || (suffix[0] != 'e' && suffix[0] != 'E') ||
        !absl::SimpleAtoi(suffix.substr(1), &exponent) || exponent < -18 || exponent > 18) {
      return std::nullopt;
    }
    scale = std::pow(10.0L, exponent);
  }
  const long double value = std::ceil(static_cast<long double>(number) * scale);
  if (value > 9.2e18L) return std::nullopt;
  return static_cast<int64_t>(value);
}

}  // namespace cohort::kube
