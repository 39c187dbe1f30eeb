#include "kube/events.h"

#include <atomic>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/rfc3339.h"

namespace cohort::kube {

nlohmann::json MakeEvent(const ObjectReference& involved, absl::string_view type,
                         absl::string_view reason, absl::string_view message,
                         absl::string_view component, absl::Time now) {
  static std::atomic<uint64_t> sequence{0};
  const std::string stamp = FormatRfc3339(now);
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata",
           {{"name", absl::StrCat(involved.name, ".", absl::ToUnixNanos(now), ".", ++sequence)},
            {"namespace", involved.namespace_}}},
          {"involvedObject",
           {{"apiVersion", involved.api_version},
            {"kind", involved.kind},
            {"name", involved.name},
            {"namespace", involved.namespace_},
            {"uid", involved.uid}}},
          {"type", type},
          {"reason", reason},
          {"message", message},
          {"firstTimestamp", stamp},
          {"lastTimestamp", stamp},
          {"count", 1},
          {"source", {{"component", component}}},
          {"reportingComponent", component}};
}

}  // namespace cohort::kube
