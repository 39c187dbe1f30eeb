// Kubernetes' protobuf encoding of the kinds typed clients write to the local API server
// (kube_protobuf.h), from bytes laid out as client-go's generated code writes them.
#include "localcluster/apiserver/kube_protobuf.h"

#include <cstdint>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cohort::local {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

// A minimal protobuf writer: length-delimited and varint fields.
std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string Bytes(int field, const std::string& value) {
  return Varint(static_cast<uint64_t>(field) << 3 | 2) + Varint(value.size()) + value;
}
std::string Number(int field, uint64_t value) {
  return Varint(static_cast<uint64_t>(field) << 3) + Varint(value);
}
std::string Entry(int field, const std::string& key, const std::string& value) {
  return Bytes(field, Bytes(1, key) + Bytes(2, value));
}
std::string Envelope(const std::string& api_version, const std::string& kind,
                     const std::string& raw) {
  return std::string("k8s\0", 4) + Bytes(1, Bytes(1, api_version) + Bytes(2, kind)) +
         Bytes(2, raw) + Bytes(3, "") + Bytes(4, "");
}

TEST(KubeProtobuf, Secret_AsHelmsStorageDriverWritesIt) {
  // ObjectMeta: name, generateName "" and namespace "" (generated code writes empty strings),
  // labels; Secret: data (bytes), type, immutable.
  const std::string meta = Bytes(1, "sh.helm.release.v1.cohort.v1") + Bytes(2, "") + Bytes(3, "") +
                           Entry(11, "owner", "helm") + Entry(11, "status", "deployed") +
                           Entry(12, "a", "b");
  const std::string secret = Bytes(1, meta) + Entry(2, "release", std::string("\x1f\x8b\x00", 3)) +
                             Bytes(3, "helm.sh/release.v1") + Number(5, 1);
  absl::StatusOr<json> decoded = DecodeKubeProtobuf(Envelope("v1", "Secret", secret));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, json::parse(R"({
    "apiVersion": "v1", "kind": "Secret",
    "metadata": {"name": "sh.helm.release.v1.cohort.v1", "labels": {"owner": "helm", "status": "deployed"},
                 "annotations": {"a": "b"}},
    "data": {"release": "H4sA"}, "type": "helm.sh/release.v1", "immutable": true})"));
}

TEST(KubeProtobuf, ConfigMapAndNamespace) {
  absl::StatusOr<json> cm = DecodeKubeProtobuf(Envelope(
      "v1", "ConfigMap",
      Bytes(1, Bytes(1, "c") + Bytes(3, "ns")) + Entry(2, "k", "v") + Entry(3, "b", "\x01")));
  ASSERT_TRUE(cm.ok()) << cm.status();
  EXPECT_EQ((*cm)["metadata"], json({{"name", "c"}, {"namespace", "ns"}}));
  EXPECT_EQ((*cm)["data"], json({{"k", "v"}}));
  EXPECT_EQ((*cm)["binaryData"], json({{"b", "AQ=="}}));
  absl::StatusOr<json> ns =
      DecodeKubeProtobuf(Envelope("v1", "Namespace", Bytes(1, Bytes(1, "team"))));
  ASSERT_TRUE(ns.ok()) << ns.status();
  EXPECT_EQ((*ns)["metadata"]["name"], "team");
}

TEST(KubeProtobuf, SelfSubjectAccessReview_AsKubectlAuthCanISendsIt) {
  const std::string attributes = Bytes(1, "default") + Bytes(2, "list") + Bytes(3, "") +
                                 Bytes(4, "") + Bytes(5, "pods") + Bytes(6, "") + Bytes(7, "");
  absl::StatusOr<json> review =
      DecodeKubeProtobuf(Envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview",
                                  Bytes(1, "") + Bytes(2, Bytes(1, attributes))));
  ASSERT_TRUE(review.ok()) << review.status();
  EXPECT_EQ((*review)["spec"]["resourceAttributes"]["verb"], "list");
  EXPECT_EQ((*review)["spec"]["resourceAttributes"]["resource"], "pods");
  EXPECT_EQ((*review)["spec"]["resourceAttributes"]["namespace"], "default");
  absl::StatusOr<json> path =
      DecodeKubeProtobuf(Envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview",
                                  Bytes(2, Bytes(2, Bytes(1, "/metrics") + Bytes(2, "get")))));
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ((*path)["spec"]["nonResourceAttributes"],
            json({{"path", "/metrics"}, {"verb", "get"}}));
}

TEST(KubeProtobuf, AnotherKind_UnimplementedNamingItAndTheFix) {
  absl::StatusOr<json> pod = DecodeKubeProtobuf(Envelope("v1", "Pod", Bytes(1, Bytes(1, "p"))));
  ASSERT_TRUE(absl::IsUnimplemented(pod.status())) << pod.status();
  EXPECT_THAT(pod.status().message(), HasSubstr("v1 Pod"));
  EXPECT_THAT(pod.status().message(), HasSubstr("send it as JSON"));
}

TEST(KubeProtobuf, Malformed_InvalidArgument) {
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeKubeProtobuf("{\"kind\": \"Secret\"}").status()));
  // A length running past the end.
  EXPECT_TRUE(
      absl::IsInvalidArgument(DecodeKubeProtobuf(std::string("k8s\0", 4) + "\x0a\x7f").status()));
  std::string truncated = Envelope("v1", "Secret", Bytes(1, Bytes(1, "s")));
  truncated.back() = '\x7f';
  truncated.push_back('\x0a');
  EXPECT_FALSE(DecodeKubeProtobuf(truncated).ok());
}

}  // namespace
}  // namespace cohort::local
