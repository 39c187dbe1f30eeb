#include "localcluster/apiserver/selector.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

// Splits on commas outside parentheses: "a in (x,y),b=c" -> {"a in (x,y)", "b=c"}.
std::vector<std::string> SplitTerms(const std::string& text) {
  std::vector<std::string> terms;
  std::string current;
  int depth = 0;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      terms.push_back(current);
      current.clear();
    } else {
      current.push_back(c);
    }
  }
  terms.push_back(current);
  return terms;
}

// The value at a dotted path ("status.phase"), as a string; nullopt when absent.
std::optional<std::string> FieldValue(const json& object, const std::string& path) {
  const json* node = &object;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    if (!node->is_object()) return std::nullopt;
    auto it = node->find(std::string(part));
    if (it == node->end()) return std::nullopt;
    node = &*it;
  }
  if (node->is_string()) return node->get<std::string>();
  if (node->is_null()) return std::nullopt;
  return node->dump();
}

}  // namespace

absl::StatusOr<Selector> Selector::ParseLabels(const std::string& text) {
  Selector s;
  for (std::string raw : SplitTerms(text)) {
    absl::string_view term = absl::StripAsciiWhitespace(raw);
    if (term.empty()) continue;
    Term t;
    size_t pos;
    if (absl::ConsumePrefix(&term, "!")) {
      t = {std::string(absl::StripAsciiWhitespace(term)), Op::kNotExists, {}};
    } else if ((pos = term.find("!=")) != absl::string_view::npos) {
      t = {std::string(absl::StripAsciiWhitespace(term.substr(0, pos))),
           Op::kNotEquals,
           {std::string(absl::StripAsciiWhitespace(term.substr(pos + 2)))}};
    } else if ((pos = term.find('=')) != absl::string_view::npos) {
      absl::string_view value = term.substr(pos + 1);
      absl::ConsumePrefix(&value, "=");
      t = {std::string(absl::StripAsciiWhitespace(term.substr(0, pos))),
           Op::kEquals,
           {std::string(absl::StripAsciiWhitespace(value))}};
    } else if ((pos = term.find(" notin ")) != absl::string_view::npos ||
               (pos = term.find(" in ")) != absl::string_view::npos) {
      bool notin = term.substr(pos, 7) == " notin ";
      absl::string_view set = absl::StripAsciiWhitespace(term.substr(pos + (notin ? 7 : 4)));
      if (!absl::ConsumePrefix(&set, "(") || !absl::ConsumeSuffix(&set, ")")) {
        return absl::InvalidArgumentError(
            absl::StrCat("label selector term '", term, "': the values must be in parentheses"));
      }
      t = {std::string(absl::StripAsciiWhitespace(term.substr(0, pos))),
           notin ? Op::kNotIn : Op::kIn,
           {}};
      for (absl::string_view v : absl::StrSplit(set, ',')) {
        t.values.emplace_back(absl::StripAsciiWhitespace(v));
      }
    } else {
      t = {std::string(term), Op::kExists, {}};
    }
    if (t.key.empty() || t.key.find(' ') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot parse label selector term '", raw, "'"));
    }
    s.terms_.push_back(std::move(t));
  }
  return s;
}

absl::StatusOr<Selector> Selector::ParseFields(const std::string& text) {
  Selector s;
  s.fields_ = true;
  for (std::string raw : SplitTerms(text)) {
    absl::string_view term = absl::StripAsciiWhitespace(raw);
    if (term.empty()) continue;
    size_t pos;
    if ((pos = term.find("!=")) != absl::string_view::npos) {
      s.terms_.push_back(
          {std::string(term.substr(0, pos)), Op::kNotEquals, {std::string(term.substr(pos + 2))}});
    } else if ((pos = term.find('=')) != absl::string_view::npos) {
      absl::string_view value = term.substr(pos + 1);
      absl::ConsumePrefix(&value, "=");
      s.terms_.push_back({std::string(term.substr(0, pos)), Op::kEquals, {std::string(value)}});
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "field selector term '", raw, "' needs = or != (for example metadata.name=x)"));
    }
  }
  return s;
}

bool Selector::Matches(const json& object) const {
  for (const Term& t : terms_) {
    std::optional<std::string> value;
    if (fields_) {
      value = FieldValue(object, t.key);
    } else if (object.contains("metadata") && object["metadata"].contains("labels")) {
      const json& labels = object["metadata"]["labels"];
      auto it = labels.find(t.key);
      if (it != labels.end() && it->is_string()) value = it->get<std::string>();
    }
    bool in = false;
    for (const std::string& v : t.values) in |= value && *value == v;
    switch (t.op) {
      case Op::kEquals:
        // A field that is absent compares as "" (so metadata.namespace= matches nothing set).
        if (fields_ ? value.value_or("") != t.values[0] : !in) return false;
        break;
      case Op::kNotEquals:
        if (fields_ ? value.value_or("") == t.values[0] : in) return false;
        break;
      case Op::kIn:
        if (!in) return false;
        break;
      case Op::kNotIn:
        if (in) return false;
        break;
      case Op::kExists:
        if (!value) return false;
        break;
      case Op::kNotExists:
        if (value) return false;
        break;
    }
  }
  return true;
}

}  // namespace cohort::local
