#pragma once

// How the local API server reads a request (its path, its body) and answers it (a Status object
// with the HTTP code and reason Kubernetes uses, a Warning header): shared by its handlers in
// api_server.cc, auth.cc and watch.cc.

#include <optional>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "localcluster/apiserver/api_server.h"
#include "localcluster/apiserver/object_store.h"

namespace cohort::local {

// The object a request's path names ("/api/v1/namespaces/ml/pods/p/status"). NotFound naming the
// path when it names no kind this server serves, or a subresource it does not.
absl::StatusOr<ResourceTarget> ParseTarget(ObjectStore& store, const std::string& path);

// A metav1.Status object for `s`.
nlohmann::json StatusObject(const absl::Status& s);
// Answers with `result` (`ok_code`) or its error as a Status object.
void Reply(httplib::Response& res, const absl::StatusOr<nlohmann::json>& result, int ok_code = 200);
// A Warning response header (RFC 7234, code 299) as the API server sends one; kubectl prints
// its text as "Warning: <text>".
std::string WarningHeader(const std::string& text);

// A request body: JSON, or the protobuf of a few kinds typed clients write. FailedPrecondition
// naming the content type otherwise.
absl::StatusOr<nlohmann::json> ParseBody(const std::string& body, const std::string& content_type);
// The request's body (ParseBody); nullopt once its error is answered.
std::optional<nlohmann::json> BodyOrAnswer(const httplib::Request& req, httplib::Response& res);

}  // namespace cohort::local
