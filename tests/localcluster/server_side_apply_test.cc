// Server-side apply and field ownership (server_side_apply.h) as pure functions: who owns what
// after applies and updates, what a re-apply removes, and when two managers conflict.
#include "localcluster/apiserver/server_side_apply.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/time.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

const absl::Time kNow = absl::FromUnixSeconds(1800000000);

json Deployment(json spec) {
  return {{"apiVersion", "apps/v1"},
          {"kind", "Deployment"},
          {"metadata", {{"name", "op"}, {"namespace", "ns"}}},
          {"spec", std::move(spec)}};
}

// The managers of `object`, by name and operation, with their FieldsV1.
json Managers(const json& object) {
  json out = json::object();
  for (const json& e : object["metadata"].value("managedFields", json::array())) {
    out[e["manager"].get<std::string>() + "/" + e["operation"].get<std::string>()] = e["fieldsV1"];
  }
  return out;
}

TEST(ServerSideApply, Create_TheManagerOwnsEveryFieldItApplied_NotTheBookkeeping) {
  absl::StatusOr<json> created = ServerSideApply(
      nullptr,
      Deployment({{"replicas", 2}, {"template", {{"spec", {{"containers", {{{"name", "a"}}}}}}}}}),
      "helm", false, /*status_subresource=*/true, kNow);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["spec"]["replicas"], 2);
  const json managers = Managers(*created);
  ASSERT_TRUE(managers.contains("helm/Apply")) << managers.dump();
  EXPECT_EQ(managers["helm/Apply"],
            json({{"f:spec",
                   {{"f:replicas", json::object()},
                    {"f:template", {{"f:spec", {{"f:containers", json::object()}}}}}}}}));
  const json& entry = (*created)["metadata"]["managedFields"][0];
  EXPECT_EQ(entry["apiVersion"], "apps/v1");
  EXPECT_EQ(entry["fieldsType"], "FieldsV1");
  EXPECT_EQ(entry["time"], "2027-01-15T08:00:00Z");
}

TEST(ServerSideApply, ReApply_AFieldLeftOutIsRemoved_UnlessAnotherManagerOwnsIt) {
  json object = *ServerSideApply(
      nullptr, Deployment({{"replicas", 2}, {"paused", true}, {"minReadySeconds", 5}}), "helm",
      false, true, kNow);
  // kubectl edit changes minReadySeconds: it owns that field from then on.
  json edited = object;
  edited["spec"]["minReadySeconds"] = 7;
  RecordUpdate(&object, edited, "kubectl-edit", true, kNow);
  EXPECT_TRUE(Managers(edited)["kubectl-edit/Update"].contains("f:spec"))
      << Managers(edited).dump();

  absl::StatusOr<json> reapplied =
      ServerSideApply(&edited, Deployment({{"replicas", 3}}), "helm", false, true, kNow);
  ASSERT_TRUE(reapplied.ok()) << reapplied.status();
  EXPECT_EQ((*reapplied)["spec"]["replicas"], 3);
  EXPECT_FALSE((*reapplied)["spec"].contains("paused")) << "helm left it out and owned it alone";
  EXPECT_EQ((*reapplied)["spec"]["minReadySeconds"], 7)
      << "kubectl-edit owns it since it changed it";
}

TEST(ServerSideApply, ChangingAFieldAnotherManagerOwns_ConflictNamingBoth_ForceTakesItOver) {
  json object = *ServerSideApply(nullptr, Deployment({{"replicas", 2}}), "helm", false, true, kNow);
  json scaled = object;
  scaled["spec"]["replicas"] = 5;
  RecordUpdate(&object, scaled, "kubectl", true, kNow);
  EXPECT_FALSE(Managers(scaled).contains("helm/Apply")) << "an update takes the field it changed";

  json wanted = Deployment({{"replicas", 2}});
  absl::StatusOr<json> refused = ServerSideApply(&scaled, wanted, "cohort-ci", false, true, kNow);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsAborted(refused.status()));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("conflict with \"kubectl\" using apps/v1: .spec.replicas"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--force-conflicts"));

  absl::StatusOr<json> forced = ServerSideApply(&scaled, wanted, "cohort-ci", true, true, kNow);
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_EQ((*forced)["spec"]["replicas"], 2);
  const json managers = Managers(*forced);
  EXPECT_FALSE(managers.contains("kubectl/Update")) << managers.dump();
  EXPECT_TRUE(managers.contains("cohort-ci/Apply"));
}

TEST(ServerSideApply, TheSameValueAnotherManagerOwns_NoConflict_BothOwnIt) {
  json object = *ServerSideApply(nullptr, Deployment({{"replicas", 2}}), "helm", false, true, kNow);
  absl::StatusOr<json> second =
      ServerSideApply(&object, Deployment({{"replicas", 2}}), "other", false, true, kNow);
  ASSERT_TRUE(second.ok()) << second.status();
  const json managers = Managers(*second);
  EXPECT_TRUE(managers.contains("helm/Apply"));
  EXPECT_TRUE(managers.contains("other/Apply"));
}

TEST(ServerSideApply, AnEmptyMapApplied_SaysTheMapExists_OtherManagersKeepTheirKeys) {
  json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata", {{"name", "c"}}},
             {"data", {{"size", "1"}, {"mine", "a"}}}};
  json object = *ServerSideApply(nullptr, cm, "alice", false, false, kNow);
  cm["data"] = {{"size", "2"}};
  object = *ServerSideApply(&object, cm, "bob", /*force=*/true, false, kNow);
  cm["data"] = json::object();
  absl::StatusOr<json> again = ServerSideApply(&object, cm, "alice", false, false, kNow);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)["data"], json({{"size", "2"}})) << "alice's own key goes, bob's stays";
}

TEST(ServerSideApply, StatusOfAKindWithAStatusSubresourceIsNobodys) {
  json d = Deployment({{"replicas", 1}});
  d["status"] = {{"replicas", 1}};
  json object = *ServerSideApply(nullptr, d, "helm", false, /*status_subresource=*/true, kNow);
  EXPECT_FALSE(Managers(object)["helm/Apply"].contains("f:status"));
  json same_without =
      *ServerSideApply(nullptr, d, "helm", false, /*status_subresource=*/false, kNow);
  EXPECT_TRUE(Managers(same_without)["helm/Apply"].contains("f:status"));
}

TEST(ServerSideApply, ApplyPatchNotAnObject_InvalidArgument) {
  EXPECT_TRUE(absl::IsInvalidArgument(
      ServerSideApply(nullptr, json::array(), "helm", false, true, kNow).status()));
}

TEST(ServerSideApply, RecordUpdate_FieldsGoneFromTheObjectAreNobodys) {
  json object = *ServerSideApply(nullptr, Deployment({{"replicas", 2}, {"paused", true}}), "helm",
                                 false, true, kNow);
  json updated = object;
  updated["spec"].erase("paused");
  RecordUpdate(&object, updated, "kubectl", true, kNow);
  EXPECT_EQ(Managers(updated)["helm/Apply"], json({{"f:spec", {{"f:replicas", json::object()}}}}));
  EXPECT_FALSE(Managers(updated).contains("kubectl/Update")) << "removing a field owns nothing";
}

TEST(FieldManagerOf, TheParameterElseTheUserAgentsProgram) {
  EXPECT_EQ(FieldManagerOf("helm", "kubectl/v1.33"), "helm");
  EXPECT_EQ(FieldManagerOf("", "kubectl/v1.33.0 (linux/amd64) kubernetes/abc"), "kubectl");
  EXPECT_EQ(FieldManagerOf("", ""), "unknown");
}

}  // namespace
}  // namespace cohort::local
