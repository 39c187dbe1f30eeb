#include "common/grpc_util.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "cohort/rpc/v1/status.pb.h"
#include "common/token.h"

namespace cohort {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string details;
  rpc::v1::Status carried;
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    google::protobuf::Any* detail = carried.add_details();
    detail->set_type_url(std::string(url));
    detail->set_value(std::string(payload));
  });
  if (carried.details_size() > 0) {
    carried.set_code(static_cast<int32_t>(status.code()));
    carried.set_message(std::string(status.message()));
    details = carried.SerializeAsString();
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      details);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  rpc::v1::Status carried;
  if (!status.error_details().empty() && carried.ParseFromString(status.error_details())) {
    for (const google::protobuf::Any& detail : carried.details()) {
      out.SetPayload(detail.type_url(), absl::Cord(detail.value()));
    }
  }
  return out;
}

void AddToken(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty())
    context->AddMetadata(kTokenMetadataKey, absl::StrCat(kTokenMetadataPrefix, token));
}

absl::Status CheckToken(const grpc::ServerContextBase& context, const std::string& token) {
  if (token.empty()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kTokenMetadataKey);
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "missing job token: the request carried no 'authorization' metadata; set COHORT_TOKEN or "
        "COHORT_TOKEN_FILE to the job's token");
  }
  if (!TokenMatches(absl::string_view(it->second.data(), it->second.size()), token)) {
    return absl::UnauthenticatedError(
        "wrong job token: the request's token does not match this job's; check that "
        "COHORT_TOKEN/COHORT_TOKEN_FILE name this job's Secret");
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

std::chrono::system_clock::time_point ToChronoDeadline(absl::Duration timeout) {
  // Cap "infinite" so chrono arithmetic cannot overflow.
  absl::Duration capped = std::min(timeout, absl::Hours(24 * 365));
  return absl::ToChronoTime(absl::Now() + capped);
}

void AllowClientKeepalive(grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5'000);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
}

grpc::ChannelArguments DefaultChannelArguments() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2'000);
  // A gang restart gives rank 0's pod a new address under the same DNS name; gRPC's default
  // (re-resolve at most every 30 s) would keep the others dialling the old one that long.
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 500);
  args.SetMaxReceiveMessageSize(16 << 20);
  // Separate channels per client object: do not share subchannels across them.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

}  // namespace cohort
