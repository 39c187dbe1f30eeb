#pragma once

#include <cstdint>
#include <functional>
#include <future>

#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cohort/coordination/v1/coordination.grpc.pb.h"
#include "common/ordered_writer.h"

namespace cohort::coordination {

namespace pb = ::cohort::coordination::v1;

// One Session stream to the coordination service: calls are sent as messages tagged with an id
// and matched with their responses, any number at a time. Once the stream ends (service gone,
// network failure) every pending and later call fails with UNAVAILABLE; make a new client to
// continue. Blocking calls are bounded by the timeout they carry, which the service enforces.
//
// Lifecycle: construct (opens the stream) -> Call()... -> destroy (cancels the stream, waits for
// it to end). Thread-safe.
class SessionClient final
    : public grpc::ClientBidiReactor<pb::SessionRequest, pb::SessionResponse> {
 public:
  // The response may be moved from.
  using Done = std::function<void(absl::Status, pb::SessionResponse&)>;

  SessionClient(pb::CoordinationService::Stub* stub, const std::string& token);
  ~SessionClient() override;
  SessionClient(const SessionClient&) = delete;
  SessionClient& operator=(const SessionClient&) = delete;

  // Sends `req` (its call_id is assigned here); `done` runs once with the call's status and
  // response, on a gRPC thread.
  void Call(pb::SessionRequest req, Done done);
  bool broken() const;
  // Fails every pending and later call with `status` and cancels the stream.
  void Abort(const absl::Status& status);

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  void FailAll(const absl::Status& status);

  grpc::ClientContext ctx_;
  pb::SessionResponse response_;

  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, Done> pending_ ABSL_GUARDED_BY(mu_);
  OrderedWriter<pb::SessionRequest> writer_ ABSL_GUARDED_BY(mu_);
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_released_ ABSL_GUARDED_BY(mu_) = false;
  // Fulfilled as OnDone's last action: the destructor may free this object only after that.
  std::promise<void> done_;
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::coordination
