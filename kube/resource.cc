#include "kube/resource.h"

#include "absl/strings/str_cat.h"

namespace cohort::kube {

std::string Resource::Path(const std::string& ns) const {
  std::string base =
      group.empty() ? absl::StrCat("/api/", version) : absl::StrCat("/apis/", group, "/", version);
  if (ns.empty()) return absl::StrCat(base, "/", plural);
  return absl::StrCat(base, "/namespaces/", ns, "/", plural);
}

}  // namespace cohort::kube
