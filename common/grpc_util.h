#pragma once

#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace cohort {

// absl::Status <-> grpc::Status with the same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// Adds the job token (when non-empty) to an outgoing call.
void AddToken(grpc::ClientContext* context, const std::string& token);

// Checks the job token of an incoming call. UNAUTHENTICATED when it is missing or wrong and a
// token is configured; OK otherwise.
absl::Status CheckToken(const grpc::ServerContextBase& context, const std::string& token);

std::chrono::system_clock::time_point ToChronoDeadline(absl::Duration timeout);

// Channel arguments shared by every Cohort client: keepalive so a dead peer is noticed, and a
// short reconnect backoff and DNS re-resolution interval so a restarted service (at a new pod
// address) is found quickly.
grpc::ChannelArguments DefaultChannelArguments();

}  // namespace cohort
