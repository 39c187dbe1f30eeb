#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace cohort::local {

// A label selector ("app=x,tier!=db,env in (a,b),!legacy,gpu") or a field selector
// ("metadata.name=x,status.phase!=Running"), as the API server's ?labelSelector= and
// ?fieldSelector= take them.
class Selector {
 public:
  // InvalidArgument names the term that cannot be parsed.
  static absl::StatusOr<Selector> ParseLabels(const std::string& text);
  static absl::StatusOr<Selector> ParseFields(const std::string& text);

  bool Matches(const nlohmann::json& object) const;
  bool empty() const { return terms_.empty(); }

 private:
  enum class Op { kEquals, kNotEquals, kIn, kNotIn, kExists, kNotExists };
  struct Term {
    std::string key;
    Op op;
    std::vector<std::string> values;
  };
  // Label terms look the key up in metadata.labels; field terms follow a dotted path.
  bool fields_ = false;
  std::vector<Term> terms_;
};

}  // namespace cohort::local
