#pragma once

// The project's real DistributedJob CRD (manifests/crd/) as JSON, for tests of the local API
// server's schema handling: what a test checks is what a user applying the manifest gets.

#include <string>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

namespace cohort::local::testing {

// A YAML document as JSON: quoted scalars stay strings; plain ones become null, booleans or
// numbers when they read as such (YAML 1.2's core schema, which is what Kubernetes applies).
inline nlohmann::json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = YamlToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& item : node) out.push_back(YamlToJson(item));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      if (node.Tag() == "!") return text;  // Quoted.
      if (text == "null" || text == "~") return nullptr;
      if (text == "true" || text == "false") return text == "true";
      nlohmann::json number = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!number.is_discarded() && number.is_number()) return number;
      return text;
    }
    default:
      return nullptr;
  }
}

inline nlohmann::json DistributedJobCrd() {
  return YamlToJson(YAML::LoadFile(std::string(COHORT_SOURCE_DIR) +
                                   "/manifests/crd/cohort.dev_distributedjobs.yaml"));
}

// The CRD's openAPIV3Schema (of its one version).
inline nlohmann::json DistributedJobSchema() {
  return DistributedJobCrd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
}

// A valid DistributedJob as a user writes it.
inline nlohmann::json Job(const std::string& name = "train") {
  return {{"apiVersion", "cohort.dev/v1alpha1"},
          {"kind", "DistributedJob"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"replicas", 2},
            {"template",
             {{"spec", {{"containers", {{{"name", "trainer"}, {"image", "trainer:1"}}}}}}}}}}};
}

}  // namespace cohort::local::testing
