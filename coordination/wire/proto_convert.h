#pragma once

#include "cohort/coordination/v1/coordination.pb.h"
#include "coordination/core/types.h"

// Conversions between the coordination core's types and the wire protocol's messages, shared by
// the server (coordination/server), the client (coordination/client), the sidecar's socket for
// libdist and libdist itself. No logic beyond the mapping.
namespace cohort::coordination {

namespace pb = ::cohort::coordination::v1;

pb::FailureCause ToProto(FailureCause cause);
FailureCause FromProto(pb::FailureCause cause);

pb::JobEvent ToProto(const JobEvent& event);
// An event with neither field set (from a newer peer) reads as a failure of unknown cause.
JobEvent FromProto(const pb::JobEvent& event);

void ToProto(KeyValueEntries entries, google::protobuf::RepeatedPtrField<pb::KeyValue>* out);
KeyValueEntries FromProto(const google::protobuf::RepeatedPtrField<pb::KeyValue>& kvs);

void ToProto(const std::vector<CollectiveProgress>& progress,
             google::protobuf::RepeatedPtrField<pb::CollectiveProgress>* out);
std::vector<CollectiveProgress> FromProto(
    const google::protobuf::RepeatedPtrField<pb::CollectiveProgress>& progress);
void ToProto(const std::vector<TaskProgress>& tasks, pb::GetJobProgressResponse* out);
std::vector<TaskProgress> FromProto(const pb::GetJobProgressResponse& response);

}  // namespace cohort::coordination
