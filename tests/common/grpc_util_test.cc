#include "common/grpc_util.h"

#include "absl/strings/cord.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

TEST(GrpcStatus, CodeMessageAndPayloadsSurviveTheRoundTrip) {
  absl::Status status = absl::AbortedError("registration superseded");
  status.SetPayload("type.cohort.dev/a", absl::Cord("one"));
  status.SetPayload("type.cohort.dev/b", absl::Cord(""));
  grpc::Status wire = ToGrpcStatus(status);
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(wire.error_message(), "registration superseded");
  EXPECT_FALSE(wire.error_details().empty());
  absl::Status back = FromGrpcStatus(wire);
  EXPECT_EQ(back, status);
  EXPECT_EQ(back.GetPayload("type.cohort.dev/a"), absl::Cord("one"));
  EXPECT_TRUE(back.GetPayload("type.cohort.dev/b").has_value());
}

TEST(GrpcStatus, NoPayloadsNoDetails_ForeignDetailsIgnored) {
  EXPECT_TRUE(ToGrpcStatus(absl::NotFoundError("x")).error_details().empty());
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  absl::Status foreign =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down", "\xff\xff not a proto"));
  EXPECT_TRUE(absl::IsUnavailable(foreign));
  EXPECT_EQ(foreign.message(), "down");
  EXPECT_FALSE(foreign.GetPayload("type.cohort.dev/a").has_value());
}

}  // namespace
}  // namespace cohort
