#include "localcluster/kubelet/pod_runtime.h"

#include <utility>

#include "localcluster/kubelet/podman_runtime.h"
#include "localcluster/kubelet/process_runtime.h"

namespace cohort::local {

std::string PodHostname(const nlohmann::json& pod) {
  return pod["spec"].value("hostname", pod["metadata"].value("name", "").substr(0, 63));
}

std::string ExpandReferences(const std::string& text,
                             const std::map<std::string, std::string>& env) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "$(") == 0) {
      size_t close = text.find(')', i);
      if (close != std::string::npos) {
        auto it = env.find(text.substr(i + 2, close - i - 2));
        if (it != env.end()) {
          out += it->second;
          i = close;
          continue;
        }
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

std::string PodRuntime::StartErrorReason(const absl::Status& error) const {
  // Kubernetes' reason for a spec that cannot be honoured.
  return absl::IsFailedPrecondition(error) ? "CreateContainerConfigError" : "StartError";
}

std::unique_ptr<PodRuntime> NewPodRuntime(const KubeletOptions& options, RuntimePod pod) {
  if (options.runtime == ContainerRuntime::kPodman)
    return std::make_unique<PodmanRuntime>(options, std::move(pod));
  return std::make_unique<ProcessRuntime>(options, std::move(pod));
}

}  // namespace cohort::local
