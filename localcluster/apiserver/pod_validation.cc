#include "localcluster/apiserver/pod_validation.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "kube/json_fields.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

std::set<std::string> Gates(const json& pod) {
  std::set<std::string> names;
  for (const json& gate : kube::Member(pod, "spec").value("schedulingGates", json::array())) {
    names.insert(gate.is_object() ? gate.value("name", "") : "");
  }
  return names;
}

}  // namespace

absl::Status ValidatePodWrite(const json& pod, const json* current) {
  const std::set<std::string> gates = Gates(pod);
  for (const std::string& name : gates) {
    if (name.empty())
      return absl::InvalidArgumentError("spec.schedulingGates[].name: Required value");
  }
  const std::string node = kube::StringMember(kube::Member(pod, "spec"), "nodeName");
  if (!gates.empty() && !node.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Pod \"", kube::StringMember(kube::Member(pod, "metadata"), "name"),
                     "\" is invalid: spec.nodeName: Forbidden: cannot be set until all "
                     "schedulingGates have been cleared"));
  }
  if (current == nullptr) return absl::OkStatus();
  const std::set<std::string> before = Gates(*current);
  for (const std::string& name : gates) {
    if (!before.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Pod \"", kube::StringMember(kube::Member(pod, "metadata"), "name"),
                       "\" is invalid: spec.schedulingGates: Forbidden: only deletion is allowed, "
                       "but found new scheduling gate '",
                       name, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace cohort::local
