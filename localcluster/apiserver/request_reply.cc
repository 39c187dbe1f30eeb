#include "localcluster/apiserver/request_reply.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "localcluster/apiserver/kube_protobuf.h"
#include "localcluster/apiserver/schema_validation.h"

namespace cohort::local {

using json = nlohmann::json;

namespace {

// The reason ("NotFound", "Conflict") and the HTTP code of a status code, as Kubernetes maps
// them.
const char* ReasonOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kNotFound:
      return "NotFound";
    case absl::StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case absl::StatusCode::kAborted:
      return "Conflict";
    case absl::StatusCode::kInvalidArgument:
      return "Invalid";
    case absl::StatusCode::kOutOfRange:
      return "Expired";
    case absl::StatusCode::kUnauthenticated:
      return "Unauthorized";
    case absl::StatusCode::kPermissionDenied:
      return "Forbidden";
    case absl::StatusCode::kUnimplemented:
      return "MethodNotAllowed";
    case absl::StatusCode::kFailedPrecondition:
      return "BadRequest";
    default:
      return "InternalError";
  }
}

int HttpCodeOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kInvalidArgument:
      return 422;
    case absl::StatusCode::kOutOfRange:
      return 410;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kUnimplemented:
      return 405;
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    default:
      return 500;
  }
}

}  // namespace

absl::StatusOr<ResourceTarget> ParseTarget(ObjectStore& store, const std::string& path) {
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  std::string group;
  size_t i;
  if (parts.size() >= 2 && parts[0] == "api") {
    i = 2;
  } else if (parts.size() >= 3 && parts[0] == "apis") {
    group = parts[1];
    i = 3;
  } else {
    return absl::NotFoundError(
        absl::StrCat("the server could not find the requested resource (", path, ")"));
  }
  ResourceTarget t;
  std::vector<std::string> rest(parts.begin() + i, parts.end());
  if (rest.size() >= 3 && rest[0] == "namespaces") {
    t.ns = rest[1];
    rest.erase(rest.begin(), rest.begin() + 2);
  }
  if (rest.empty()) return absl::NotFoundError(absl::StrCat("no resource in ", path));
  std::optional<ResourceType> type = store.FindType(group, rest[0]);
  std::string version = group.empty() ? parts[1] : parts[2];
  if (!type || type->version != version) {
    return absl::NotFoundError(absl::StrCat("the server could not find the requested resource (",
                                            group.empty() ? "" : group + "/", version, ", ",
                                            rest[0], ")"));
  }
  t.type = *type;
  if (rest.size() >= 2) t.name = rest[1];
  if (rest.size() >= 3) t.subresource = rest[2];
  if (rest.size() > 3 ||
      (!t.subresource.empty() && t.subresource != "status" && t.subresource != "eviction" &&
       !(t.subresource == "scale" && t.type.scale) && t.subresource != "log" &&
       !(t.subresource == "token" && t.type.kind == "ServiceAccount"))) {
    return absl::NotFoundError(absl::StrCat("the server does not serve ", path));
  }
  return t;
}

json StatusObject(const absl::Status& s) {
  if (std::optional<json> body = StatusBody(s)) return *body;  // Built whole, with its details.
  return {{"kind", "Status"},
          {"apiVersion", "v1"},
          {"metadata", json::object()},
          {"status", "Failure"},
          {"message", std::string(s.message())},
          {"reason", ReasonOf(s.code())},
          {"code", HttpCodeOf(s.code())}};
}

void Reply(httplib::Response& res, const absl::StatusOr<json>& result, int ok_code) {
  if (result.ok()) {
    res.status = ok_code;
    res.set_content(result->dump(), "application/json");
  } else {
    json status = StatusObject(result.status());
    res.status = status.value("code", HttpCodeOf(result.status().code()));
    res.set_content(status.dump(), "application/json");
  }
}

// A Warning response header (RFC 7234, code 299) as the API server sends one; kubectl prints
// its text as "Warning: <text>".
std::string WarningHeader(const std::string& text) {
  std::string quoted;
  for (char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return absl::StrCat("299 - \"", quoted, "\"");
}

absl::StatusOr<json> ParseBody(const std::string& body, const std::string& content_type) {
  if (absl::StrContains(content_type, kKubeProtobufMediaType)) return DecodeKubeProtobuf(body);
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the request body (Content-Type: ", content_type.empty() ? "none" : content_type,
        ") is not valid JSON; this server reads JSON (and the protobuf of a few kinds typed "
        "clients write)"));
  }
  return parsed;
}

// The request's body (ParseBody); nullopt once its error is answered.
std::optional<json> BodyOrAnswer(const httplib::Request& req, httplib::Response& res) {
  absl::StatusOr<json> body = ParseBody(req.body, req.get_header_value("Content-Type"));
  if (!body.ok()) {
    Reply(res, body.status());
    return std::nullopt;
  }
  return *std::move(body);
}

}  // namespace cohort::local
