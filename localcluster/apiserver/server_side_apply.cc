#include "localcluster/apiserver/server_side_apply.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rfc3339.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;
using Path = std::vector<std::string>;
using FieldSet = std::set<Path>;

// Fields nobody owns: identity and bookkeeping.
bool Unowned(const Path& path, bool status_subresource) {
  if (path.empty()) return true;
  if (path[0] == "apiVersion" || path[0] == "kind") return true;
  if (path[0] == "status" && status_subresource) return true;
  if (path[0] == "metadata" && path.size() >= 2) {
    static const std::set<std::string> kBookkeeping = {"name",
                                                       "namespace",
                                                       "uid",
                                                       "resourceVersion",
                                                       "generation",
                                                       "creationTimestamp",
                                                       "deletionTimestamp",
                                                       "deletionGracePeriodSeconds",
                                                       "managedFields",
                                                       "selfLink"};
    return kBookkeeping.contains(path[1]);
  }
  return false;
}

void Collect(const json& value, Path& path, bool status_subresource, FieldSet& out) {
  if (!path.empty() && Unowned(path, status_subresource)) return;
  if (value.is_object() && !value.empty()) {
    for (const auto& [key, member] : value.items()) {
      path.push_back(key);
      Collect(member, path, status_subresource, out);
      path.pop_back();
    }
    return;
  }
  if (!path.empty()) out.insert(path);
}

FieldSet FieldsOf(const json& object, bool status_subresource) {
  FieldSet fields;
  Path path;
  Collect(object, path, status_subresource, fields);
  return fields;
}

const json* Find(const json& object, const Path& path) {
  const json* at = &object;
  for (const std::string& key : path) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

void Set(json& object, const Path& path, const json& value) {
  json* at = &object;
  for (const std::string& key : path) {
    if (!at->is_object()) *at = json::object();
    at = &(*at)[key];
  }
  *at = value;
}

// Removes the field, and the objects above it that it leaves empty.
void Erase(json& object, const Path& path, size_t depth = 0) {
  if (depth >= path.size() || !object.is_object()) return;
  auto it = object.find(path[depth]);
  if (it == object.end()) return;
  if (depth + 1 == path.size()) {
    object.erase(it);
    return;
  }
  Erase(*it, path, depth + 1);
  if (it->is_object() && it->empty()) object.erase(it);
}

// An applied {} where the object has a map: it says the map exists, not that it is empty.
bool EmptyObjectOverObject(const json& applied, const json* current) {
  return applied.is_object() && applied.empty() && current != nullptr && current->is_object();
}

bool Overlaps(const Path& a, const Path& b) {
  size_t n = std::min(a.size(), b.size());
  return std::equal(a.begin(), a.begin() + n, b.begin());
}

std::string Dotted(const Path& path) { return absl::StrCat(".", absl::StrJoin(path, ".")); }

// FieldsV1: {"f:<key>": {...}} with {} at each owned field.
json ToFieldsV1(const FieldSet& fields) {
  json out = json::object();
  for (const Path& path : fields) {
    json* at = &out;
    for (const std::string& key : path) at = &(*at)[absl::StrCat("f:", key)];
    if (at->is_null()) *at = json::object();
  }
  return out;
}

void FromFieldsV1(const json& node, Path& path, FieldSet& out) {
  bool any = false;
  if (node.is_object()) {
    for (const auto& [key, member] : node.items()) {
      if (key.rfind("f:", 0) != 0)
        continue;  // "." (the map itself), k:/v:/i: (lists: atomic here).
      any = true;
      path.push_back(key.substr(2));
      FromFieldsV1(member, path, out);
      path.pop_back();
    }
  }
  if (!any && !path.empty()) out.insert(path);
}

struct Manager {
  std::string name;
  std::string operation;  // "Apply" or "Update".
  std::string api_version;
  std::string time;
  FieldSet fields;
};

std::vector<Manager> ManagersOf(const json& object) {
  std::vector<Manager> managers;
  const json* entries = Find(object, {"metadata", "managedFields"});
  if (entries == nullptr || !entries->is_array()) return managers;
  for (const json& e : *entries) {
    if (!e.is_object()) continue;
    Manager m;
    m.name = e.value("manager", "");
    m.operation = e.value("operation", "Update");
    m.api_version = e.value("apiVersion", "");
    m.time = e.value("time", "");
    if (auto it = e.find("fieldsV1"); it != e.end()) {
      Path path;
      FromFieldsV1(*it, path, m.fields);
    }
    managers.push_back(std::move(m));
  }
  return managers;
}

void WriteManagers(json& object, const std::vector<Manager>& managers) {
  json entries = json::array();
  for (const Manager& m : managers) {
    if (m.fields.empty()) continue;
    entries.push_back({{"manager", m.name},
                       {"operation", m.operation},
                       {"apiVersion", m.api_version},
                       {"time", m.time},
                       {"fieldsType", "FieldsV1"},
                       {"fieldsV1", ToFieldsV1(m.fields)}});
  }
  if (entries.empty()) {
    if (object.contains("metadata") && object["metadata"].is_object())
      object["metadata"].erase("managedFields");
    return;
  }
  object["metadata"]["managedFields"] = std::move(entries);
}

Manager& Entry(std::vector<Manager>& managers, const std::string& name,
               const std::string& operation) {
  for (Manager& m : managers) {
    if (m.name == name && m.operation == operation) return m;
  }
  managers.push_back(Manager{name, operation, "", "", {}});
  return managers.back();
}

void Disown(Manager& m, const Path& path) {
  for (auto it = m.fields.begin(); it != m.fields.end();) {
    it = Overlaps(*it, path) ? m.fields.erase(it) : std::next(it);
  }
}

}  // namespace

absl::StatusOr<json> ServerSideApply(const json* current, const json& applied,
                                     const std::string& manager, bool force,
                                     bool status_subresource, absl::Time now) {
  if (!applied.is_object()) return absl::InvalidArgumentError("an apply patch must be an object");
  const FieldSet wanted = FieldsOf(applied, status_subresource);
  json result = current != nullptr ? *current : applied;
  std::vector<Manager> managers =
      current != nullptr ? ManagersOf(*current) : std::vector<Manager>{};

  if (current != nullptr) {
    // Conflicts: a field another manager owns, set to a different value.
    std::vector<std::string> conflicts;
    for (const Path& field : wanted) {
      const json* now_value = Find(*current, field);
      if (now_value != nullptr && *now_value == *Find(applied, field)) continue;
      if (EmptyObjectOverObject(*Find(applied, field), now_value)) continue;
      for (const Manager& m : managers) {
        if (m.name == manager && m.operation == "Apply") continue;
        for (const Path& owned : m.fields) {
          if (Overlaps(owned, field)) {
            conflicts.push_back(absl::StrCat(
                "conflict with \"", m.name, "\"",
                m.operation == "Update" ? " using " + m.api_version : "", ": ", Dotted(field)));
            break;
          }
        }
      }
    }
    if (!conflicts.empty() && !force) {
      return absl::AbortedError(absl::StrCat("Apply failed with ", conflicts.size(), " conflict",
                                             conflicts.size() == 1 ? "" : "s", ": ",
                                             absl::StrJoin(conflicts, "; "),
                                             ". Leave those fields out of the applied "
                                             "configuration, or apply with force (kubectl apply "
                                             "--server-side --force-conflicts) to take them over"));
    }
    // The fields this manager applied before and leaves out now go, unless someone else owns them.
    Manager& own = Entry(managers, manager, "Apply");
    for (const Path& field : own.fields) {
      if (wanted.contains(field)) continue;
      bool shared = false;
      for (const Manager& m : managers) {
        if (&m == &own) continue;
        for (const Path& owned : m.fields) shared = shared || Overlaps(owned, field);
      }
      if (!shared) Erase(result, field);
    }
    for (const Path& field : wanted) {
      if (!EmptyObjectOverObject(*Find(applied, field), Find(result, field)))
        Set(result, field, *Find(applied, field));
    }
    // Taken over (force), or set to the value another manager already had: that manager keeps
    // it only when the value did not change.
    for (Manager& m : managers) {
      if (&m == &own) continue;
      for (const Path& field : wanted) {
        const json* before = Find(*current, field);
        if (EmptyObjectOverObject(*Find(applied, field), before)) continue;
        if (before == nullptr || *before != *Find(applied, field)) Disown(m, field);
      }
    }
  }
  Manager& own = Entry(managers, manager, "Apply");
  own.fields = wanted;
  own.api_version = applied.value("apiVersion", "");
  own.time = FormatRfc3339(now);
  WriteManagers(result, managers);
  return result;
}

void RecordUpdate(const json* before, json& after, const std::string& manager,
                  bool status_subresource, absl::Time now) {
  std::vector<Manager> managers = before != nullptr ? ManagersOf(*before) : ManagersOf(after);
  const FieldSet fields = FieldsOf(after, status_subresource);
  FieldSet changed;
  for (const Path& field : fields) {
    const json* was = before != nullptr ? Find(*before, field) : nullptr;
    if (was == nullptr || *was != *Find(after, field)) changed.insert(field);
  }
  for (Manager& m : managers) {
    for (auto it = m.fields.begin(); it != m.fields.end();) {
      // Gone from the object: nobody's. Changed by this write: the writer's alone.
      bool gone = Find(after, *it) == nullptr;
      bool taken = false;
      for (const Path& field : changed) taken = taken || Overlaps(*it, field);
      it = (gone || taken) ? m.fields.erase(it) : std::next(it);
    }
  }
  if (!changed.empty() && !manager.empty()) {
    Manager& own = Entry(managers, manager, "Update");
    own.fields.insert(changed.begin(), changed.end());
    own.api_version = after.value("apiVersion", "");
    own.time = FormatRfc3339(now);
  }
  WriteManagers(after, managers);
}

std::string FieldManagerOf(const std::string& field_manager_param, const std::string& user_agent) {
  if (!field_manager_param.empty()) return field_manager_param;
  std::string agent = user_agent.substr(0, user_agent.find('/'));
  return agent.empty() ? "unknown" : agent;
}

}  // namespace cohort::local
