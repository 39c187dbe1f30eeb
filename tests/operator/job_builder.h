#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace cohort::op::testing {

// Builds DistributedJob objects as the API server would return them: a valid job by default,
// each setter changing one thing.
class JobBuilder {
 public:
  explicit JobBuilder(std::string name = "train") {
    obj_ = {{"apiVersion", "cohort.dev/v1alpha1"},
            {"kind", "DistributedJob"},
            {"metadata", {{"name", name}, {"namespace", "ml"}, {"uid", "u-1"}, {"generation", 1}}},
            {"spec",
             {{"replicas", 4},
              {"template",
               {{"spec", {{"containers", {{{"name", "trainer"}, {"image", "trainer:1"}}}}}}}}}}};
  }
  JobBuilder& Set(const nlohmann::json::json_pointer& path, nlohmann::json value) {
    obj_[path] = std::move(value);
    return *this;
  }
  JobBuilder& Spec(const std::string& field, nlohmann::json value) {
    obj_["spec"][field] = std::move(value);
    return *this;
  }
  JobBuilder& Erase(const std::string& spec_field) {
    obj_["spec"].erase(spec_field);
    return *this;
  }
  nlohmann::json Build() const { return obj_; }

 private:
  nlohmann::json obj_;
};

}  // namespace cohort::op::testing
