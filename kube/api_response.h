#pragma once

// How the API server's answers read, apart from the HTTP transport so that the parsing is tested
// and fuzzed without a server: an error body as a Status, and a watch response as events. Nothing
// here throws or trusts the shape of what the server sent.

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cohort::kube {

// The Status an HTTP error `code` means, with the mapping KubeClient documents (404 NotFound, 409
// AlreadyExists on POST else Aborted, 410 OutOfRange, 429/5xx Unavailable, ...). `body` is usually
// a metav1.Status whose message names the cause; otherwise its first 200 bytes are quoted. Never
// OK.
absl::Status StatusFromResponse(const std::string& method, const std::string& path, int code,
                                const std::string& body);

// Splits a watch response body into events as its chunks arrive: one JSON object per line
// ({"type": ADDED|MODIFIED|DELETED|BOOKMARK, "object": ...}). Lines that are not JSON objects are
// skipped, and so is a last line without its newline when the stream ends. An ERROR event, whose
// object is a metav1.Status, ends the stream with that status (410 Gone: IsGone). One per watch;
// not thread-safe.
class WatchStreamDecoder {
 public:
  using EventCallback = std::function<bool(const nlohmann::json& event)>;

  // `path` names the watch in error messages.
  explicit WatchStreamDecoder(std::string path) : path_(std::move(path)) {}

  // Feeds the next chunk: `on_event` gets each event it completes, in order. Returns false when
  // the stream must end: `on_event` returned false (then cancelled()), or an ERROR event came
  // (then status()). Feeding after that is a no-op that returns false.
  bool Feed(absl::string_view chunk, const EventCallback& on_event);

  bool cancelled() const { return cancelled_; }
  // OK unless an ERROR event ended the stream.
  const absl::Status& status() const { return status_; }

 private:
  const std::string path_;
  std::string pending_;  // The start of an event whose newline has not come yet.
  absl::Status status_;
  bool cancelled_ = false;
};

}  // namespace cohort::kube
