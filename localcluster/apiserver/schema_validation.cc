#include "localcluster/apiserver/schema_validation.h"

#include <charconv>
#include <cmath>
#include <regex>
#include <set>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

// Where StatusError() keeps the Status object in an absl::Status.
constexpr char kStatusBodyUrl[] = "type.googleapis.com/cohort.local.KubernetesStatus";

// ObjectMeta's fields: all that pruning keeps of a resource's metadata.
const std::set<std::string>& ObjectMetaFields() {
  static const auto* fields = new std::set<std::string>{"annotations",
                                                        "creationTimestamp",
                                                        "deletionGracePeriodSeconds",
                                                        "deletionTimestamp",
                                                        "finalizers",
                                                        "generateName",
                                                        "generation",
                                                        "labels",
                                                        "managedFields",
                                                        "name",
                                                        "namespace",
                                                        "ownerReferences",
                                                        "resourceVersion",
                                                        "selfLink",
                                                        "uid"};
  return *fields;
}

bool IsMetaField(const std::string& key) {
  return key == "apiVersion" || key == "kind" || key == "metadata";
}

std::string Child(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}
std::string Index(const std::string& path, size_t i) { return absl::StrCat(path, "[", i, "]"); }

const json* Find(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}
const json* Subschema(const json& schema, const char* key) {
  const json* s = Find(schema, key);
  return s != nullptr && s->is_object() ? s : nullptr;
}
bool Flag(const json& schema, const char* key) {
  const json* f = Find(schema, key);
  return f != nullptr && f->is_boolean() && f->get<bool>();
}
std::optional<double> Number(const json& schema, const char* key) {
  const json* n = Find(schema, key);
  if (n == nullptr || !n->is_number()) return std::nullopt;
  return n->get<double>();
}

// Go's strconv.Quote: how the server quotes values and paths in messages.
std::string GoQuote(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\a':
        out += "\\a";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\v':
        out += "\\v";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\x%02x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Go's %v of a float64: the shortest digits, in exponent form below 1e-4 and from 1e6 on.
std::string GoFloat(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string sci(buf, end);
  size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  int exponent = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  if (exponent < -4 || exponent >= 6) {
    std::string m = digits.substr(0, 1);
    if (digits.size() > 1) absl::StrAppend(&m, ".", digits.substr(1));
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return sign + m + exp;
  }
  if (exponent < 0) return absl::StrCat(sign, "0.", std::string(-exponent - 1, '0'), digits);
  if (static_cast<int>(digits.size()) <= exponent + 1) {
    return absl::StrCat(sign, digits, std::string(exponent + 1 - digits.size(), '0'));
  }
  return absl::StrCat(sign, digits.substr(0, exponent + 1), ".", digits.substr(exponent + 1));
}

// Go's %#v of a decoded JSON value (map[string]interface {}, []interface {}, ...).
std::string GoSyntax(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "interface {}(nil)";
    case json::value_t::string:
      return GoQuote(v.get<std::string>());
    case json::value_t::number_float:
      return GoFloat(v.get<double>());
    case json::value_t::array: {
      std::vector<std::string> items;
      for (const json& item : v) items.push_back(GoSyntax(item));
      return absl::StrCat("[]interface {}{", absl::StrJoin(items, ", "), "}");
    }
    case json::value_t::object: {
      std::vector<std::string> items;
      for (const auto& [key, item] : v.items())
        items.push_back(absl::StrCat(GoQuote(key), ":", GoSyntax(item)));
      return absl::StrCat("map[string]interface {}{", absl::StrJoin(items, ", "), "}");
    }
    default:
      return v.dump();  // Integers and booleans.
  }
}

// How field.Error shows a bad value: simple values as Go prints them, strings quoted, anything
// else in Go syntax; a missing value is "null".
std::string BadValue(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return GoQuote("null");
    case json::value_t::string:
      return GoQuote(v.get<std::string>());
    case json::value_t::number_float:
      return GoFloat(v.get<double>());
    case json::value_t::array:
    case json::value_t::object:
      return GoSyntax(v);
    default:
      return v.dump();
  }
}

FieldError Invalid(const std::string& field, const json& value, const std::string& detail) {
  return {"FieldValueInvalid", field,
          absl::StrCat("Invalid value: ", BadValue(value), ": ", detail)};
}
FieldError TypeInvalid(const std::string& field, const json& value, const std::string& detail) {
  return {"FieldValueTypeInvalid", field,
          absl::StrCat("Invalid value: ", BadValue(value), ": ", detail)};
}
FieldError Required(const std::string& field, const std::string& detail = "") {
  return {"FieldValueRequired", field,
          detail.empty() ? "Required value" : absl::StrCat("Required value: ", detail)};
}
FieldError NotSupported(const std::string& field, const json& value, const json& allowed) {
  std::vector<std::string> quoted;
  for (const json& a : allowed)
    quoted.push_back(GoQuote(a.is_string() ? a.get<std::string>() : a.dump()));
  return {"FieldValueNotSupported", field,
          absl::StrCat("Unsupported value: ", BadValue(value),
                       ": supported values: ", absl::StrJoin(quoted, ", "))};
}
FieldError Duplicate(const std::string& field, const json& value) {
  return {"FieldValueDuplicate", field, absl::StrCat("Duplicate value: ", BadValue(value))};
}
FieldError TooLong(const std::string& field, int64_t max) {
  return {"FieldValueTooLong", field,
          absl::StrCat("Too long: may not be more than ", max, max == 1 ? " byte" : " bytes")};
}
FieldError TooMany(const std::string& field, int64_t actual, int64_t max) {
  return {"FieldValueTooMany", field,
          absl::StrCat("Too many: ", actual, ": must have at most ", max, " items")};
}

// The type name kube-openapi gives a decoded JSON value.
std::string JsonType(const json& v) {
  switch (v.type()) {
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::string:
      return "string";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    default:
      return "null";
  }
}

bool IsIntegral(const json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  double d = v.get<double>();
  return std::isfinite(d) && std::trunc(d) == d;
}

// The formats Kubernetes keeps in a CRD schema; every other format (int32, int64, ...) is
// dropped before validation.
std::string SupportedFormat(const json& schema) {
  static const auto* supported = new std::set<std::string>{
      "bsonobjectid", "uri",        "email",    "hostname", "ipv4",     "ipv6", "cidr",
      "mac",          "uuid",       "uuid3",    "uuid4",    "uuid5",    "isbn", "isbn10",
      "isbn13",       "creditcard", "ssn",      "hexcolor", "rgbcolor", "byte", "password",
      "date",         "duration",   "datetime", "date-time"};
  const json* f = Find(schema, "format");
  if (f == nullptr || !f->is_string()) return "";
  std::string format = f->get<std::string>();
  return supported->count(format) ? format : "";
}

int64_t Utf8Length(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

// A bound as the server prints it: an integer for an integer value, else a float.
std::string Bound(double bound, const json& value) {
  return value.is_number_integer() ? absl::StrCat(static_cast<int64_t>(bound)) : GoFloat(bound);
}

// One schema node against one value, as kube-openapi's SchemaValidator runs its validators:
// type, allOf, string, format, number, array, enum, object. `path` is relative to the value the
// validation started at (messages use it); `prefix` is put before it in the errors' field.
class Validator {
 public:
  Validator(std::string prefix, std::vector<FieldError>* errors)
      : prefix_(std::move(prefix)), errors_(errors) {}

  void Validate(const json& s, const json& v, const std::string& path) {
    if (!s.is_object()) return;
    const std::string field = FieldOf(path);
    const std::string in = absl::StrCat(path, " in body");
    std::vector<std::string> types;
    if (Flag(s, "x-kubernetes-int-or-string")) {
      types = {"integer", "string"};
    } else if (const json* t = Find(s, "type"); t != nullptr && t->is_string()) {
      types = {t->get<std::string>()};
    }
    auto has = [&types](const std::string& t) {
      return std::find(types.begin(), types.end(), t) != types.end();
    };
    const std::string format = SupportedFormat(s);

    if (v.is_null()) {
      if (!types.empty() && !Flag(s, "nullable")) {
        Add(TypeInvalid(
            field, "null",
            absl::StrCat(in, " must be of type ", absl::StrJoin(types, ","), ": \"null\"")));
      }
      return;
    }

    const std::string actual = JsonType(v);
    if (!types.empty()) {
      bool float_int = actual == "number" && IsIntegral(v) && has("integer");
      bool int_float = actual == "integer" && has("number");
      bool string_or_list = v.is_string() || v.is_array();
      if (!string_or_list && !format.empty() && !(has(actual) || float_int || int_float)) {
        // kube-openapi names the value's Go format here ("int64"), not its type.
        std::string value_format = actual == "integer"  ? "int64"
                                   : actual == "number" ? "float64"
                                                        : "";
        Add(TypeInvalid(
            field, value_format,
            absl::StrCat(in, " must be of type ", format, ": ", GoQuote(value_format))));
      } else if (!(has("number") || has("integer")) && !format.empty() && string_or_list) {
        // A string or a list where a formatted string is expected passes the type check.
      } else if (!(has(actual) || float_int || int_float)) {
        Add(TypeInvalid(field, actual,
                        absl::StrCat(in, " must be of type ", absl::StrJoin(types, ","), ": ",
                                     GoQuote(actual))));
      }
    }

    if (const json* all_of = Find(s, "allOf"); all_of != nullptr && all_of->is_array()) {
      for (const json& branch : *all_of) Validate(branch, v, path);
    }

    if (v.is_string()) {
      const std::string& str = v.get_ref<const std::string&>();
      int64_t length = Utf8Length(str);
      if (std::optional<double> max = Number(s, "maxLength"); max && length > *max) {
        Add(TooLong(field, static_cast<int64_t>(*max)));
      }
      if (std::optional<double> min = Number(s, "minLength"); min && length < *min) {
        Add(Invalid(
            field, v,
            absl::StrCat(in, " should be at least ", static_cast<int64_t>(*min), " chars long")));
      }
      if (const json* pattern = Find(s, "pattern"); pattern != nullptr && pattern->is_string()) {
        try {
          if (!std::regex_search(str,
                                 std::regex(pattern->get<std::string>(), std::regex::ECMAScript))) {
            Add(Invalid(field, v,
                        absl::StrCat(in, " should match '", pattern->get<std::string>(), "'")));
          }
        } catch (const std::regex_error&) {
          // A pattern std::regex cannot compile (RE2-only syntax) is not checked.
        }
      }
      if (!FormatValid(format, str)) {
        Add(TypeInvalid(field, v,
                        absl::StrCat(in, " must be of type ", format, ": ", GoQuote(str))));
      }
    }

    if (v.is_number()) {
      double x = v.get<double>();
      if (std::optional<double> factor = Number(s, "multipleOf"); factor && *factor > 0) {
        double q = x / *factor;
        if (std::trunc(q) != q) {
          Add(Invalid(field, v, absl::StrCat(in, " should be a multiple of ", Bound(*factor, v))));
        }
      }
      if (std::optional<double> max = Number(s, "maximum")) {
        bool exclusive = Flag(s, "exclusiveMaximum");
        if (exclusive ? x >= *max : x > *max) {
          Add(Invalid(
              field, v,
              absl::StrCat(
                  in, exclusive ? " should be less than " : " should be less than or equal to ",
                  Bound(*max, v))));
        }
      }
      if (std::optional<double> min = Number(s, "minimum")) {
        bool exclusive = Flag(s, "exclusiveMinimum");
        if (exclusive ? x <= *min : x < *min) {
          Add(Invalid(field, v,
                      absl::StrCat(in,
                                   exclusive ? " should be greater than "
                                             : " should be greater than or equal to ",
                                   Bound(*min, v))));
        }
      }
    }

    if (v.is_array()) {
      if (const json* items = Subschema(s, "items")) {
        for (size_t i = 0; i < v.size(); ++i) Validate(*items, v[i], Index(path, i));
      }
      int64_t size = static_cast<int64_t>(v.size());
      if (std::optional<double> min = Number(s, "minItems"); min && size < *min) {
        Add(Invalid(
            field, size,
            absl::StrCat(in, " should have at least ", static_cast<int64_t>(*min), " items")));
      }
      if (std::optional<double> max = Number(s, "maxItems"); max && size > *max) {
        Add(TooMany(field, size, static_cast<int64_t>(*max)));
      }
      if (Flag(s, "uniqueItems")) {
        for (size_t i = 0; i < v.size(); ++i) {
          if (std::find(v.begin(), v.begin() + i, v[i]) != v.begin() + i) {
            Add(Invalid(field, "", absl::StrCat(in, " shouldn't contain duplicates")));
            break;
          }
        }
      }
    }

    if (const json* allowed = Find(s, "enum");
        allowed != nullptr && allowed->is_array() && !allowed->empty()) {
      if (std::find(allowed->begin(), allowed->end(), v) == allowed->end())
        Add(NotSupported(field, v, *allowed));
    }

    if (v.is_object()) {
      int64_t count = static_cast<int64_t>(v.size());
      if (std::optional<double> min = Number(s, "minProperties"); min && count < *min) {
        Add(Invalid(
            field, count,
            absl::StrCat(in, " should have at least ", static_cast<int64_t>(*min), " properties")));
        return;
      }
      if (std::optional<double> max = Number(s, "maxProperties"); max && count > *max) {
        Add(TooMany(field, count, static_cast<int64_t>(*max)));
        return;
      }
      const json* properties = Subschema(s, "properties");
      if (const json* additional = Subschema(s, "additionalProperties")) {
        for (const auto& [key, value] : v.items()) {
          if (properties == nullptr || !properties->contains(key))
            Validate(*additional, value, Child(path, key));
        }
      }
      if (properties != nullptr) {
        for (const auto& [key, property] : properties->items()) {
          if (const json* value = Find(v, key.c_str()))
            Validate(property, *value, Child(path, key));
        }
      }
      if (const json* required = Find(s, "required"); required != nullptr && required->is_array()) {
        for (const json& key : *required) {
          if (key.is_string() && !v.contains(key.get<std::string>())) {
            Add(Required(FieldOf(Child(path, key.get<std::string>()))));
          }
        }
      }
    }
  }

 private:
  std::string FieldOf(const std::string& path) const {
    if (prefix_.empty()) return path;
    return path.empty() ? prefix_ : absl::StrCat(prefix_, ".", path);
  }
  void Add(FieldError e) { errors_->push_back(std::move(e)); }

  static bool FormatValid(const std::string& format, const std::string& s) {
    static const std::regex date_time(
        R"(^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:?\d{2})$)");
    static const std::regex date(R"(^\d{4}-\d{2}-\d{2}$)");
    if (format == "date-time" || format == "datetime") return std::regex_match(s, date_time);
    if (format == "date") return std::regex_match(s, date);
    return true;  // The other formats are not checked here.
  }

  const std::string prefix_;
  std::vector<FieldError>* const errors_;
};

void PruneMetadata(json& metadata, const std::string& path, std::vector<std::string>* pruned) {
  if (!metadata.is_object()) return;
  for (auto it = metadata.begin(); it != metadata.end();) {
    if (ObjectMetaFields().count(it.key())) {
      ++it;
    } else {
      pruned->push_back(Child(path, it.key()));
      it = metadata.erase(it);
    }
  }
}

void Prune(json& x, const json* s, const std::string& path, std::vector<std::string>* pruned);

// Below x-kubernetes-preserve-unknown-fields: unknown fields stay; declared ones are pruned
// below as usual.
void SkipPrune(json& x, const json* s, const std::string& path, std::vector<std::string>* pruned) {
  if (s == nullptr) return;
  if (x.is_object()) {
    bool embedded = Flag(*s, "x-kubernetes-embedded-resource");
    const json* properties = Subschema(*s, "properties");
    const json* additional = Subschema(*s, "additionalProperties");
    for (auto& [key, value] : x.items()) {
      if (embedded && IsMetaField(key)) {
        if (key == "metadata") PruneMetadata(value, Child(path, key), pruned);
        continue;
      }
      if (properties != nullptr && properties->contains(key)) {
        Prune(value, &(*properties)[key], Child(path, key), pruned);
      } else if (additional != nullptr) {
        Prune(value, additional, Child(path, key), pruned);
      }
    }
  } else if (x.is_array()) {
    for (size_t i = 0; i < x.size(); ++i)
      SkipPrune(x[i], Subschema(*s, "items"), Index(path, i), pruned);
  }
}

void Prune(json& x, const json* s, const std::string& path, std::vector<std::string>* pruned) {
  if (s != nullptr && Flag(*s, "x-kubernetes-preserve-unknown-fields")) {
    SkipPrune(x, s, path, pruned);
    return;
  }
  if (x.is_object()) {
    const json* properties = s != nullptr ? Subschema(*s, "properties") : nullptr;
    const json* additional = s != nullptr ? Subschema(*s, "additionalProperties") : nullptr;
    bool embedded = s != nullptr && Flag(*s, "x-kubernetes-embedded-resource");
    bool root = path.empty();
    for (auto it = x.begin(); it != x.end();) {
      const std::string key = it.key();
      if ((root || embedded) && IsMetaField(key)) {
        if (key == "metadata") PruneMetadata(*it, Child(path, key), pruned);
        ++it;
      } else if (properties != nullptr && properties->contains(key)) {
        Prune(*it, &(*properties)[key], Child(path, key), pruned);
        ++it;
      } else if (additional != nullptr) {
        Prune(*it, additional, Child(path, key), pruned);
        ++it;
      } else {
        pruned->push_back(Child(path, key));
        it = x.erase(it);
      }
    }
  } else if (x.is_array()) {
    const json* items = s != nullptr ? Subschema(*s, "items") : nullptr;
    for (size_t i = 0; i < x.size(); ++i) Prune(x[i], items, Index(path, i), pruned);
  }
}

void Structure(const json& s, const json& x, const std::string& path,
               std::vector<FieldError>* errors) {
  if (!s.is_object()) return;
  if (x.is_object()) {
    if (Flag(s, "x-kubernetes-embedded-resource")) {
      for (const char* key : {"apiVersion", "kind"}) {
        const json* value = Find(x, key);
        if (value == nullptr) {
          errors->push_back(Required(Child(path, key), "must not be empty"));
        } else if (!value->is_string()) {
          errors->push_back(Invalid(Child(path, key), *value, "must be a string"));
        } else if (value->get_ref<const std::string&>().empty()) {
          errors->push_back(Invalid(Child(path, key), *value, "must not be empty"));
        }
      }
    }
    const json* properties = Subschema(s, "properties");
    const json* additional = Subschema(s, "additionalProperties");
    for (const auto& [key, value] : x.items()) {
      if (properties != nullptr && properties->contains(key)) {
        Structure((*properties)[key], value, Child(path, key), errors);
      } else if (additional != nullptr) {
        Structure(*additional, value, Child(path, key), errors);
      }
    }
  } else if (x.is_array()) {
    const json* list_type = Find(s, "x-kubernetes-list-type");
    std::string type =
        list_type != nullptr && list_type->is_string() ? list_type->get<std::string>() : "";
    if (type == "set") {
      for (size_t i = 0; i < x.size(); ++i) {
        if (std::find(x.begin(), x.begin() + i, x[i]) != x.begin() + i) {
          errors->push_back(Duplicate(Index(path, i), x[i]));
        }
      }
    } else if (type == "map") {
      const json* keys = Find(s, "x-kubernetes-list-map-keys");
      std::vector<json> seen;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!x[i].is_object() && !x[i].is_null()) {
          errors->push_back(
              Invalid(Index(path, i), x[i], "must be an object for an array of list-type map"));
          return;
        }
        json key = json::object();
        if (keys != nullptr && keys->is_array()) {
          for (const json& k : *keys) {
            if (k.is_string() && x[i].is_object() && x[i].contains(k.get<std::string>())) {
              key[k.get<std::string>()] = x[i][k.get<std::string>()];
            }
          }
        }
        if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
          errors->push_back(Duplicate(Index(path, i), key));
        } else {
          seen.push_back(std::move(key));
        }
      }
    }
    if (const json* items = Subschema(s, "items")) {
      for (size_t i = 0; i < x.size(); ++i) Structure(*items, x[i], Index(path, i), errors);
    }
  }
}

}  // namespace

std::string FieldError::ToString() const { return absl::StrCat(field, ": ", message); }

absl::StatusOr<FieldValidation> ParseFieldValidation(absl::string_view value,
                                                     absl::string_view options_kind) {
  if (value.empty() || value == "Warn") return FieldValidation::kWarn;
  if (value == "Strict") return FieldValidation::kStrict;
  if (value == "Ignore") return FieldValidation::kIgnore;
  return StatusError(InvalidStatus("meta.k8s.io", std::string(options_kind), "",
                                   {NotSupported("fieldValidation", std::string(value),
                                                 json::array({"", "Ignore", "Strict", "Warn"}))}));
}

std::vector<std::string> PruneUnknownFields(const json& schema, json& object) {
  std::vector<std::string> pruned;
  Prune(object, schema.is_object() ? &schema : nullptr, "", &pruned);
  return pruned;
}

void ApplyDefaults(const json& schema, json& value) {
  if (!schema.is_object()) return;
  if (value.is_object()) {
    const json* properties = Subschema(schema, "properties");
    if (properties != nullptr) {
      for (const auto& [key, property] : properties->items()) {
        const json* fallback = Find(property, "default");
        auto it = value.find(key);
        bool missing = it == value.end() || (it->is_null() && !Flag(property, "nullable"));
        if (fallback != nullptr && missing) value[key] = *fallback;
      }
    }
    const json* additional = Subschema(schema, "additionalProperties");
    for (auto it = value.begin(); it != value.end();) {
      const json* s = properties != nullptr && properties->contains(it.key())
                          ? &(*properties)[it.key()]
                          : additional;
      if (s == nullptr) {
        ++it;
      } else if (it->is_null() && !Flag(*s, "nullable")) {
        it = value.erase(it);  // No default (it would have been set above): as if never sent.
      } else {
        ApplyDefaults(*s, *it);
        ++it;
      }
    }
  } else if (value.is_array()) {
    if (const json* items = Subschema(schema, "items")) {
      for (json& item : value) ApplyDefaults(*items, item);
    }
  }
}

std::vector<FieldError> ValidateAgainstSchema(const json& schema, const json& value,
                                              const std::string& field_prefix) {
  std::vector<FieldError> errors;
  Validator(field_prefix, &errors).Validate(schema, value, "");
  return errors;
}

std::vector<FieldError> ValidateStructure(const json& schema, const json& object) {
  std::vector<FieldError> errors;
  Structure(schema, object, "", &errors);
  return errors;
}

json InvalidStatus(const std::string& group, const std::string& kind, const std::string& name,
                   const std::vector<FieldError>& errors) {
  std::vector<std::string> distinct;
  std::set<std::string> seen;
  json causes = json::array();
  for (const FieldError& e : errors) {
    if (seen.insert(e.ToString()).second) distinct.push_back(e.ToString());
    causes.push_back({{"reason", e.reason}, {"message", e.message}, {"field", e.field}});
  }
  std::string qualified_kind = group.empty() ? kind : absl::StrCat(kind, ".", group);
  std::string message = absl::StrCat(qualified_kind, " ", GoQuote(name), " is invalid");
  if (distinct.size() == 1) absl::StrAppend(&message, ": ", distinct[0]);
  if (distinct.size() > 1) absl::StrAppend(&message, ": [", absl::StrJoin(distinct, ", "), "]");
  json details = json::object();
  if (!name.empty()) details["name"] = name;
  if (!group.empty()) details["group"] = group;
  if (!kind.empty()) details["kind"] = kind;
  details["causes"] = causes;
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", "Invalid"},
          {"details", details},  {"code", 422}};
}

absl::Status StatusError(const json& status) {
  std::string message = status.value("message", "");
  absl::Status s = status.value("code", 422) == 400 ? absl::FailedPreconditionError(message)
                                                    : absl::InvalidArgumentError(message);
  s.SetPayload(kStatusBodyUrl, absl::Cord(status.dump()));
  return s;
}

std::optional<json> StatusBody(const absl::Status& status) {
  auto payload = status.GetPayload(kStatusBodyUrl);
  if (!payload) return std::nullopt;
  json body = json::parse(std::string(*payload), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return std::nullopt;
  return body;
}

absl::Status AdmitCustomResource(const ResourceType& type, const CustomResourceWrite& write,
                                 json& object, std::vector<std::string>* warnings) {
  if (type.schema == nullptr || !type.schema->is_object()) return absl::OkStatus();
  const json& schema = *type.schema;
  // A patch's strict error quotes the patched object as it was before pruning.
  json sent = write.verb == CustomResourceWrite::Verb::kPatch &&
                      write.field_validation == FieldValidation::kStrict
                  ? object
                  : json();
  std::vector<std::string> unknown = PruneUnknownFields(schema, object);
  if (!unknown.empty() && write.field_validation != FieldValidation::kIgnore) {
    std::vector<std::string> problems;
    for (const std::string& path : unknown)
      problems.push_back(absl::StrCat("unknown field ", GoQuote(path)));
    if (write.field_validation == FieldValidation::kWarn) {
      if (warnings != nullptr) warnings->insert(warnings->end(), problems.begin(), problems.end());
    } else {
      std::string strict = absl::StrCat("strict decoding error: ", absl::StrJoin(problems, ", "));
      if (write.verb == CustomResourceWrite::Verb::kPatch) {
        return StatusError(InvalidStatus("", "", "", {Invalid("patch", sent.dump(), strict)}));
      }
      return absl::FailedPreconditionError(
          absl::StrCat(type.kind, " in version ", GoQuote(type.version), " cannot be handled as a ",
                       type.kind, ": ", strict));
    }
  }
  ApplyDefaults(schema, object);
  std::vector<FieldError> errors;
  if (!write.status_only) {
    errors = ValidateAgainstSchema(schema, object);
  } else if (const json* properties = Subschema(schema, "properties");
             properties != nullptr && object.contains("status") && properties->contains("status")) {
    errors = ValidateAgainstSchema((*properties)["status"], object["status"], "status");
  }
  std::vector<FieldError> structure = ValidateStructure(schema, object);
  errors.insert(errors.end(), structure.begin(), structure.end());
  if (errors.empty()) return absl::OkStatus();
  std::string name = object.contains("metadata") ? object["metadata"].value("name", "") : "";
  return StatusError(InvalidStatus(type.group, type.kind, name, errors));
}

}  // namespace cohort::local
