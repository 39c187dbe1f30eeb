#pragma once

// Reading objects that come from the cluster without trusting their shape. Every accessor returns
// a default (null, "", the fallback) for an absent member, a member of another JSON type, or a
// parent that is not an object, and none throws. The operator must not crash on what an API
// server sends (a CRD without a schema, a newer server, a hand-edited object): nlohmann's value(),
// get() and at() throw on such input, and const operator[] on a missing key is undefined
// behaviour.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace cohort::kube {

// The member `key` of `object`, or a null value.
inline const nlohmann::json& Member(const nlohmann::json& object, const char* key) {
  static const nlohmann::json* const kNull = new nlohmann::json();
  if (!object.is_object()) return *kNull;
  auto it = object.find(key);
  return it == object.end() ? *kNull : *it;
}

// Member(object, a)[b]...: a path of object members, or a null value.
template <typename... Keys>
const nlohmann::json& Member(const nlohmann::json& object, const char* key, Keys... more) {
  return Member(Member(object, key), more...);
}

inline std::string StringMember(const nlohmann::json& object, const char* key,
                                std::string fallback = "") {
  const nlohmann::json& v = Member(object, key);
  return v.is_string() ? v.get<std::string>() : fallback;
}

inline bool BoolMember(const nlohmann::json& object, const char* key, bool fallback = false) {
  const nlohmann::json& v = Member(object, key);
  return v.is_boolean() ? v.get<bool>() : fallback;
}

// An integer member that fits in int64 (a number with a fraction, or out of range, is absent).
inline std::optional<int64_t> IntMember(const nlohmann::json& object, const char* key) {
  const nlohmann::json& v = Member(object, key);
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

// The elements of an array member (an empty array when it is absent or not an array), for
// range-for loops.
inline const nlohmann::json& ArrayMember(const nlohmann::json& object, const char* key) {
  static const nlohmann::json* const kEmpty = new nlohmann::json(nlohmann::json::array());
  const nlohmann::json& v = Member(object, key);
  return v.is_array() ? v : *kEmpty;
}

}  // namespace cohort::kube
