#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "cohort/coordination/v1/coordination.pb.h"
#include "sidecar/coordination/types.h"

namespace cohort::agent {

namespace pb = ::cohort::coordination::v1;

// The asynchronous calls a trainer makes on its job once connected. Two implementations: the
// Agent itself (in-process, libdist standalone mode) and libdist's client of the sidecar's Unix
// socket (agent mode). Each callback is invoked exactly once, on an arbitrary thread.
class ControlPlane {
 public:
  template <typename Resp>
  using Callback = std::function<void(absl::Status, const Resp&)>;

  virtual ~ControlPlane() = default;

  virtual void InsertKeyValue(pb::InsertKeyValueRequest req,
                              Callback<pb::InsertKeyValueResponse> done) = 0;
  virtual void GetKeyValue(pb::GetKeyValueRequest req, Callback<pb::GetKeyValueResponse> done) = 0;
  virtual void TryGetKeyValue(pb::TryGetKeyValueRequest req,
                              Callback<pb::TryGetKeyValueResponse> done) = 0;
  virtual void GetKeyValueDir(pb::GetKeyValueDirRequest req,
                              Callback<pb::GetKeyValueDirResponse> done) = 0;
  virtual void DeleteKeyValue(pb::DeleteKeyValueRequest req,
                              Callback<pb::DeleteKeyValueResponse> done) = 0;
  virtual void IncrementKeyValue(pb::IncrementKeyValueRequest req,
                                 Callback<pb::IncrementKeyValueResponse> done) = 0;
  virtual void Barrier(pb::BarrierRequest req, Callback<pb::BarrierResponse> done) = 0;
  virtual void CancelBarrier(pb::CancelBarrierRequest req,
                             Callback<pb::CancelBarrierResponse> done) = 0;
  virtual void ReportPreemption(Callback<pb::ReportPreemptionResponse> done) = 0;
  virtual void ReportError(coordination::FailureCause cause, std::string message,
                           Callback<pb::ReportErrorResponse> done) = 0;
  virtual void Shutdown(Callback<pb::ShutdownTaskResponse> done) = 0;
};

}  // namespace cohort::agent
