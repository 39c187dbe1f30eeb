#include "kube/api_response.h"

#include <algorithm>
#include <climits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "kube/json_fields.h"

namespace cohort::kube {

using json = nlohmann::json;

absl::Status StatusFromResponse(const std::string& method, const std::string& path, int code,
                                const std::string& body) {
  json status = json::parse(body, nullptr, /*allow_exceptions=*/false);
  std::string message = StringMember(status, "message", body.substr(0, 200));
  std::string text = absl::StrCat(method, " ", path, ": ", message, " (HTTP ", code, ")");
  switch (code) {
    case 400:
    case 422:
      return absl::InvalidArgumentError(text);
    case 401:
      return absl::UnauthenticatedError(text);
    case 403:
      return absl::PermissionDeniedError(text);
    case 404:
      return absl::NotFoundError(text);
    case 409:
      return method == "POST" ? absl::AlreadyExistsError(text) : absl::AbortedError(text);
    case 410:
      return absl::OutOfRangeError(text);
    default:
      if (code == 429 || code >= 500) return absl::UnavailableError(text);
      return absl::UnknownError(text);
  }
}

bool WatchStreamDecoder::Feed(absl::string_view chunk, const EventCallback& on_event) {
  if (cancelled_ || !status_.ok()) return false;
  pending_.append(chunk.data(), chunk.size());
  size_t start = 0;
  for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
    json event = json::parse(pending_.begin() + start, pending_.begin() + nl, nullptr, false);
    if (event.is_discarded() || !event.is_object()) continue;
    if (StringMember(event, "type") == "ERROR") {
      const json& object = Member(event, "object");
      std::optional<int64_t> code = IntMember(object, "code");
      status_ = StatusFromResponse(
          "WATCH", path_,
          code && *code >= INT_MIN && *code <= INT_MAX ? static_cast<int>(*code) : 500,
          object.dump());
      return false;
    }
    if (!on_event(event)) {
      cancelled_ = true;
      return false;
    }
  }
  pending_.erase(0, start);
  return true;
}

}  // namespace cohort::kube
