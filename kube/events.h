#pragma once

// Events about an object, as client-go's record.EventRecorder writes them (core/v1 Event): what
// `kubectl describe` shows under Events.

#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cohort::kube {

// The object an Event is about.
struct ObjectReference {
  std::string api_version;  // "cohort.dev/v1alpha1".
  std::string kind;
  std::string namespace_;
  std::string name;
  std::string uid;
};

// An Event of `type` ("Normal" or "Warning") about `involved`, reported by `component` at `now`,
// in the involved object's namespace, under a name of its own ("<object>.<unix nanos>.<n>", n
// counting the Events this process made).
nlohmann::json MakeEvent(const ObjectReference& involved, absl::string_view type,
                         absl::string_view reason, absl::string_view message,
                         absl::string_view component, absl::Time now);

}  // namespace cohort::kube
