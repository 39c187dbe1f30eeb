#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cohort/coordination/v1/attempts.pb.h"

// Who follows rank 0's attempt hub (attempt_hub.h) as which pod: every pod's sidecar under its
// pod index, spare pods holding no slot under their names, and the slots spares took
// (docs/operator.md, "Hot spares"). A follower is a stream id the hub chose; the hub keeps the
// streams and carries out what this registry decides (pushes, ends). Pure: no streams, no clock.
namespace cohort::coordination {

namespace attemptspb = ::cohort::coordination::v1;

class SlotRegistry {
 public:
  using StreamId = uint64_t;
  // A stream the hub is to end, with the status its follower hears.
  struct Ending {
    StreamId stream = 0;
    absl::Status why;
  };
  struct Admission {
    absl::Status refused;         // Not OK: the stream is ended with it and follows nothing.
    std::vector<Ending> endings;  // Streams this one displaces.
  };

  // Rank 0's own sidecar follows in process (it is pod 0 from then on).
  void FollowLocally() { rank0_local_ = true; }

  // Stream `stream` asks to follow: as pod `pod_index`, or (`spare` set, `pod_index` 0) as a spare
  // holding no slot, or (`spare` set, `pod_index` > 0) as the spare that took that slot, back after
  // a broken stream or restarted as the slot's sidecar. `pod_name`: the pod's name, so that a pod a
  // spare displaced is never let back (an evicted pod's sidecar still up, a lost node that
  // returns).
  Admission Follow(StreamId stream, int32_t pod_index, const std::string& spare,
                   const std::string& pod_name);
  // The stream ended (its sidecar went or its connection broke): it follows no more, as a pod or as
  // a spare. False when it followed nothing.
  bool Gone(StreamId stream);
  // Every stream goes (the hub stops); the slots spares took stay known.
  void DropStreams();

  // Why `assignments` (spares taking the slots of pods that are gone) cannot be carried out now
  // ("" when they can): pod index 0 or below, a spare that does not follow, an index or a spare
  // named twice.
  std::string CheckAssignments(const std::vector<attemptspb::SpareAssignment>& assignments) const;
  // The stream of spare `spare` while it follows holding no slot.
  std::optional<StreamId> SpareStream(const std::string& spare) const;
  // Spare `spare`, told its pod index in restart attempt `attempt`, takes slot `pod_index` from
  // now on: the names that followed as that pod are displaced for good. The stream that followed
  // as the pod, if any, is to end.
  std::optional<Ending> GiveSlot(int32_t pod_index, const std::string& spare, int32_t attempt);
  // Spare `spare` went before it could take a slot.
  void DropSpare(const std::string& spare) { spares_.erase(spare); }

  // The pods that follow now (0 when rank 0's sidecar follows in process), by pod index.
  std::set<int32_t> Following() const;
  const std::map<int32_t, StreamId>& followers() const { return followers_; }
  const std::map<std::string, StreamId>& spares() const { return spares_; }
  // Which spare holds `pod_index` ("" for none).
  std::string HolderOf(int32_t pod_index) const;

 private:
  bool rank0_local_ = false;
  // Followers by pod index (a pod that follows again replaces its stream).
  std::map<int32_t, StreamId> followers_;
  // Spares that follow holding no slot, by pod name (one that takes a slot moves to followers_).
  std::map<std::string, StreamId> spares_;
  // The pod indices spares took, and which spare holds each (also while its stream is broken, or
  // it restarts as the slot's sidecar): no other pod may follow with that index while the spare
  // follows; once it is gone, a pod of a name not displaced (a replacement) takes the slot back.
  std::map<int32_t, std::string> held_by_spare_;
  // The names of the pods that followed each index, and those a spare displaced from it.
  std::map<int32_t, std::set<std::string>> seen_names_;
  std::map<int32_t, std::set<std::string>> displaced_;
};

}  // namespace cohort::coordination
