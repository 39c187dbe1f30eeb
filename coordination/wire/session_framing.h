#pragma once

#include <utility>

#include "cohort/coordination/v1/coordination.pb.h"

// How each key-value and barrier call travels inside the Session stream: which field of
// SessionRequest carries its request, and which field of SessionResponse its result. The
// server's session reactor and the client's stub both use these, so the two sides cannot drift.
namespace cohort::coordination {

namespace pb = ::cohort::coordination::v1;

inline void SetCall(pb::SessionRequest* out, pb::InsertKeyValueRequest r) {
  *out->mutable_insert_key_value() = std::move(r);
}
inline void SetCall(pb::SessionRequest* out, pb::GetKeyValueRequest r) {
  *out->mutable_get_key_value() = std::move(r);
}
inline void SetCall(pb::SessionRequest* out, pb::TryGetKeyValueRequest r) {
  *out->mutable_try_get_key_value() = std::move(r);
}
inline void SetCall(pb::SessionRequest* out, pb::GetKeyValueDirRequest r) {
  *out->mutable_get_key_value_dir() = std::move(r);
}
inline void SetCall(pb::SessionRequest* out, pb::DeleteKeyValueRequest r) {
  *out->mutable_delete_key_value() = std::move(r);
}
inline void SetCall(pb::SessionRequest* out, pb::IncrementKeyValueRequest r) {
  *out->mutable_increment_key_value() = std::move(r);
}
inline void SetCall(pb::SessionRequest* out, pb::BarrierRequest r) {
  *out->mutable_barrier() = std::move(r);
}
inline void SetCall(pb::SessionRequest* out, pb::CancelBarrierRequest r) {
  *out->mutable_cancel_barrier() = std::move(r);
}

// A try-get answers in the get's field (both carry one KeyValue). Calls with no result leave the
// response's result unset.
inline void PutResult(pb::SessionResponse* out, pb::GetKeyValueResponse r) {
  *out->mutable_get_key_value() = std::move(r);
}
inline void PutResult(pb::SessionResponse* out, pb::TryGetKeyValueResponse r) {
  if (r.has_kv()) *out->mutable_get_key_value()->mutable_kv() = std::move(*r.mutable_kv());
}
inline void PutResult(pb::SessionResponse* out, pb::GetKeyValueDirResponse r) {
  *out->mutable_get_key_value_dir() = std::move(r);
}
inline void PutResult(pb::SessionResponse* out, pb::IncrementKeyValueResponse r) {
  *out->mutable_increment_key_value() = std::move(r);
}
inline void PutResult(pb::SessionResponse* out, pb::BarrierResponse r) {
  *out->mutable_barrier() = std::move(r);
}
inline void PutResult(pb::SessionResponse*, pb::InsertKeyValueResponse) {}
inline void PutResult(pb::SessionResponse*, pb::DeleteKeyValueResponse) {}
inline void PutResult(pb::SessionResponse*, pb::CancelBarrierResponse) {}

inline void TakeResult(pb::SessionResponse* in, pb::GetKeyValueResponse* out) {
  *out = std::move(*in->mutable_get_key_value());
}
inline void TakeResult(pb::SessionResponse* in, pb::TryGetKeyValueResponse* out) {
  // Only a found key carries one: a try-get that failed reads back without a kv, as it was sent.
  if (in->get_key_value().has_kv()) {
    *out->mutable_kv() = std::move(*in->mutable_get_key_value()->mutable_kv());
  }
}
inline void TakeResult(pb::SessionResponse* in, pb::GetKeyValueDirResponse* out) {
  *out = std::move(*in->mutable_get_key_value_dir());
}
inline void TakeResult(pb::SessionResponse* in, pb::IncrementKeyValueResponse* out) {
  *out = std::move(*in->mutable_increment_key_value());
}
inline void TakeResult(pb::SessionResponse* in, pb::BarrierResponse* out) {
  *out = std::move(*in->mutable_barrier());
}
inline void TakeResult(pb::SessionResponse*, pb::InsertKeyValueResponse*) {}
inline void TakeResult(pb::SessionResponse*, pb::DeleteKeyValueResponse*) {}
inline void TakeResult(pb::SessionResponse*, pb::CancelBarrierResponse*) {}

}  // namespace cohort::coordination
