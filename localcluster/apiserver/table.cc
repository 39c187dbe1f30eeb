#include "localcluster/apiserver/table.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/rfc3339.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

// A JSONPath of the simple form printer columns use: ".status.phase".
json Lookup(const json& object, const std::string& path) {
  const json* node = &object;
  for (absl::string_view part : absl::StrSplit(path, '.', absl::SkipEmpty())) {
    if (!node->is_object() || !node->contains(std::string(part))) return nullptr;
    node = &(*node)[std::string(part)];
  }
  return *node;
}

// A pod's READY: as Kubernetes counts, the containers plus native sidecars (init containers
// that always restart), ready out of all.
json PodReady(const json& o) {
  const json& status = o.value("status", json::object());
  size_t total = o["spec"].value("containers", json::array()).size();
  std::set<std::string> sidecars;
  for (const json& c : o["spec"].value("initContainers", json::array())) {
    if (c.value("restartPolicy", "") == "Always") sidecars.insert(c.value("name", ""));
  }
  total += sidecars.size();
  int ready = 0;
  for (const json& s : status.value("containerStatuses", json::array()))
    ready += s.value("ready", false) ? 1 : 0;
  for (const json& s : status.value("initContainerStatuses", json::array())) {
    ready += sidecars.count(s.value("name", "")) && s.value("ready", false) ? 1 : 0;
  }
  return absl::StrCat(ready, "/", total);
}

// A pod's STATUS: Terminating, a failed container's reason, or its phase.
json PodStatus(const json& o) {
  if (o["metadata"].contains("deletionTimestamp")) return "Terminating";
  const json& st = o.value("status", json::object());
  for (const json& s : st.value("containerStatuses", json::array())) {
    const json& state = s.value("state", json::object());
    if (state.contains("terminated") && state["terminated"].value("exitCode", 0) != 0) {
      return state["terminated"].value("reason", "Error");
    }
  }
  return st.value("phase", "Pending");
}

// A pod's RESTARTS: its containers' restarts.
json PodRestarts(const json& o) {
  int n = 0;
  for (const json& s :
       o.value("status", json::object()).value("containerStatuses", json::array())) {
    n += s.value("restartCount", 0);
  }
  return n;
}

// A node's STATUS, as kubectl prints it: Ready when its Ready condition is True, else NotReady;
// ",SchedulingDisabled" after it while the node is cordoned (spec.unschedulable).
json NodeStatus(const json& o) {
  std::string status = "Unknown";
  for (const json& c : o.value("status", json::object()).value("conditions", json::array())) {
    if (c.value("type", "") == "Ready")
      status = c.value("status", "") == "True" ? "Ready" : "NotReady";
  }
  const json spec = o.value("spec", json::object());
  if (spec.is_object() && spec.contains("unschedulable") && spec["unschedulable"] == true)
    status += ",SchedulingDisabled";
  return status;
}

// A node's INTERNAL-IP.
json NodeInternalIp(const json& o) {
  for (const json& a : o.value("status", json::object()).value("addresses", json::array())) {
    if (a.value("type", "") == "InternalIP") return a.value("address", "");
  }
  return "<none>";
}

}  // namespace

// "5s", "3m", "2h", "4d": kubectl's AGE.
std::string HumanAge(absl::Duration d) {
  int64_t s = std::max<int64_t>(0, absl::ToInt64Seconds(d));
  if (s < 120) return absl::StrCat(s, "s");
  if (s < 3600 * 2) return absl::StrCat(s / 60, "m", s % 60 ? absl::StrCat(s % 60, "s") : "");
  if (s < 86400 * 2)
    return absl::StrCat(s / 3600, "h", (s % 3600) / 60 ? absl::StrCat((s % 3600) / 60, "m") : "");
  return absl::StrCat(s / 86400, "d");
}

// kubectl get asks for a Table; the columns are the CRD's printer columns or a kind's usual ones.
json ToTable(const ResourceType& t, const std::vector<json>& objects, absl::Time now,
             const std::string& resource_version) {
  json columns = json::array({{{"name", "Name"},
                               {"type", "string"},
                               {"format", "name"},
                               {"description", "Name of the object"},
                               {"priority", 0}}});
  std::vector<std::function<json(const json&)>> cells = {
      [](const json& o) { return o["metadata"].value("name", ""); }};
  auto age = [now](const json& o) -> json {
    std::optional<absl::Time> created = ParseRfc3339(o["metadata"].value("creationTimestamp", ""));
    return created ? json(HumanAge(now - *created)) : json("<unknown>");
  };
  auto column = [&](const std::string& name, const std::string& type, int priority, auto cell) {
    columns.push_back({{"name", name},
                       {"type", type},
                       {"format", ""},
                       {"description", name},
                       {"priority", priority}});
    cells.push_back(cell);
  };
  if (!t.printer_columns.empty()) {
    for (const json& c : t.printer_columns) {
      std::string path = c.value("jsonPath", "");
      std::string type = c.value("type", "string");
      column(c.value("name", ""), type, c.value("priority", 0),
             [path, type, age](const json& o) -> json {
               if (type == "date") {
                 std::optional<absl::Time> at = ParseRfc3339(
                     Lookup(o, path).is_string() ? Lookup(o, path).get<std::string>() : "");
                 return at ? age(json{{"metadata", {{"creationTimestamp", FormatRfc3339(*at)}}}})
                           : json("<unknown>");
               }
               json v = Lookup(o, path);
               return v.is_null() ? json("") : v;
             });
    }
  } else if (t.kind == "Pod") {
    column("Ready", "string", 0, PodReady);
    column("Status", "string", 0, PodStatus);
    column("Restarts", "integer", 0, PodRestarts);
    column("Age", "string", 0, age);
    column("IP", "string", 1, [](const json& o) -> json {
      return o.value("status", json::object()).value("podIP", "<none>");
    });
    column("Node", "string", 1,
           [](const json& o) -> json { return o["spec"].value("nodeName", "<none>"); });
  } else if (t.kind == "Node") {
    column("Status", "string", 0, NodeStatus);
    column("Age", "string", 0, age);
    column("Internal-IP", "string", 1, NodeInternalIp);
  } else {
    column("Age", "string", 0, age);
  }
  json rows = json::array();
  for (const json& o : objects) {
    json row_cells = json::array();
    for (const auto& cell : cells) row_cells.push_back(cell(o));
    rows.push_back({{"cells", row_cells},
                    {"object",
                     {{"kind", "PartialObjectMetadata"},
                      {"apiVersion", "meta.k8s.io/v1"},
                      {"metadata", o["metadata"]}}}});
  }
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", {{"resourceVersion", resource_version}}},
          {"columnDefinitions", columns},
          {"rows", rows}};
}

}  // namespace cohort::local
