#include "localcluster/apiserver/kube_protobuf.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

// One message's fields, read in order. Field numbers are those of k8s.io/api's generated.proto
// (core/v1 and apimachinery's meta/v1 and runtime).
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}

  // Calls `field(number, wire_type, varint, bytes)` for each field; false when malformed.
  bool Each(const std::function<bool(int, int, uint64_t, std::string_view)>& field) {
    while (pos_ < bytes_.size()) {
      uint64_t key = 0;
      if (!Varint(&key)) return false;
      const int number = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
      uint64_t value = 0;
      std::string_view payload;
      switch (type) {
        case 0:
          if (!Varint(&value)) return false;
          break;
        case 1:
          if (bytes_.size() - pos_ < 8) return false;
          pos_ += 8;
          break;
        case 2: {
          uint64_t n = 0;
          if (!Varint(&n) || n > bytes_.size() - pos_) return false;
          payload = bytes_.substr(pos_, n);
          pos_ += n;
          break;
        }
        case 5:
          if (bytes_.size() - pos_ < 4) return false;
          pos_ += 4;
          break;
        default:
          return false;
      }
      if (!field(number, type, value, payload)) return false;
    }
    return true;
  }

 private:
  bool Varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && pos_ < bytes_.size(); shift += 7) {
      const auto b = static_cast<uint8_t>(bytes_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *out = v;
        return true;
      }
    }
    return false;
  }

  std::string_view bytes_;
  size_t pos_ = 0;
};

// A map<string, string|bytes> entry: key 1, value 2.
bool MapEntry(std::string_view entry, json& into, bool base64_value) {
  std::string key, value;
  bool ok = Reader(entry).Each([&](int n, int type, uint64_t, std::string_view b) {
    if (type != 2) return true;
    if (n == 1) key = b;
    if (n == 2) value = b;
    return true;
  });
  if (!ok) return false;
  into[key] = base64_value ? absl::Base64Escape(value) : value;
  return true;
}

bool ObjectMeta(std::string_view bytes, json& meta) {
  return Reader(bytes).Each([&](int n, int type, uint64_t, std::string_view b) {
    // Generated code writes every string field, empty or not; empty means unset.
    if (type != 2 || b.empty()) return true;
    switch (n) {
      case 1:
        meta["name"] = std::string(b);
        return true;
      case 2:
        meta["generateName"] = std::string(b);
        return true;
      case 3:
        meta["namespace"] = std::string(b);
        return true;
      case 6:
        meta["resourceVersion"] = std::string(b);
        return true;
      case 11:
        return MapEntry(b, meta["labels"], false);
      case 12:
        return MapEntry(b, meta["annotations"], false);
      case 14:
        meta["finalizers"].push_back(std::string(b));
        return true;
      default:
        return true;  // Set by the server, or not used by the clients that write here.
    }
  });
}

// Reads `object`'s metadata (field 1) and hands every other field to `rest`.
bool Object(std::string_view bytes, json& object,
            const std::function<bool(int, int, uint64_t, std::string_view)>& rest) {
  return Reader(bytes).Each([&](int n, int type, uint64_t v, std::string_view b) {
    if (n == 1 && type == 2) return ObjectMeta(b, object["metadata"]);
    return rest(n, type, v, b);
  });
}

}  // namespace

absl::StatusOr<json> DecodeKubeProtobuf(const std::string& body) {
  static constexpr std::string_view kMagic("k8s\0", 4);
  auto malformed = [](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("the protobuf request body is malformed: ", what));
  };
  if (body.size() < kMagic.size() || std::string_view(body).substr(0, 4) != kMagic) {
    return malformed("it does not start with Kubernetes' \"k8s\\0\" prefix");
  }
  std::string api_version, kind;
  std::string_view raw;
  bool ok = Reader(std::string_view(body).substr(4))
                .Each([&](int n, int type, uint64_t, std::string_view b) {
                  if (type != 2) return true;
                  if (n == 1) {  // TypeMeta.
                    return Reader(b).Each([&](int m, int t, uint64_t, std::string_view v) {
                      if (t == 2 && m == 1) api_version = v;
                      if (t == 2 && m == 2) kind = v;
                      return true;
                    });
                  }
                  if (n == 2) raw = b;
                  return true;
                });
  if (!ok) return malformed("its runtime.Unknown envelope cannot be read");
  json object = {{"apiVersion", api_version}, {"kind", kind}, {"metadata", json::object()}};
  if (api_version == "v1" && kind == "Secret") {
    ok = Object(raw, object, [&](int n, int type, uint64_t v, std::string_view b) {
      if (n == 2 && type == 2) return MapEntry(b, object["data"], /*base64_value=*/true);
      if (n == 3 && type == 2) object["type"] = std::string(b);
      if (n == 4 && type == 2) return MapEntry(b, object["stringData"], false);
      if (n == 5 && type == 0) object["immutable"] = v != 0;
      return true;
    });
  } else if (api_version == "v1" && kind == "ConfigMap") {
    ok = Object(raw, object, [&](int n, int type, uint64_t v, std::string_view b) {
      if (n == 2 && type == 2) return MapEntry(b, object["data"], false);
      if (n == 3 && type == 2) return MapEntry(b, object["binaryData"], /*base64_value=*/true);
      if (n == 4 && type == 0) object["immutable"] = v != 0;
      return true;
    });
  } else if (api_version == "authorization.k8s.io/v1" && kind == "SelfSubjectAccessReview") {
    // spec (2): resourceAttributes (1) {namespace 1, verb 2, group 3, version 4, resource 5,
    // subresource 6, name 7} or nonResourceAttributes (2) {path 1, verb 2}.
    static const char* const kResourceFields[] = {"",        "namespace", "verb",        "group",
                                                  "version", "resource",  "subresource", "name"};
    ok = Object(raw, object, [&](int n, int type, uint64_t, std::string_view b) {
      if (n != 2 || type != 2) return true;
      json& spec = object["spec"];
      return Reader(b).Each([&](int m, int t, uint64_t, std::string_view attributes) {
        if (t != 2 || (m != 1 && m != 2)) return true;
        json& into = spec[m == 1 ? "resourceAttributes" : "nonResourceAttributes"];
        into = json::object();
        return Reader(attributes).Each([&](int f, int ft, uint64_t, std::string_view v) {
          if (ft != 2) return true;
          if (m == 1 && f >= 1 && f <= 7) into[kResourceFields[f]] = std::string(v);
          if (m == 2 && f == 1) into["path"] = std::string(v);
          if (m == 2 && f == 2) into["verb"] = std::string(v);
          return true;
        });
      });
    });
  } else if (api_version == "v1" && kind == "Namespace") {
    ok = Object(raw, object, [](int, int, uint64_t, std::string_view) { return true; });
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "a protobuf body of ", api_version.empty() ? "an unnamed kind" : api_version + " " + kind,
        " is not read here (only v1 Secret, ConfigMap, Namespace and SelfSubjectAccessReview); "
        "send it as JSON"));
  }
  if (!ok) return malformed(absl::StrCat("its ", kind, " cannot be read"));
  return object;
}

}  // namespace cohort::local
