#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "libdist/src/collectives/collective_op.h"
#include "libdist/src/collectives/shm_segments.h"

namespace dist::internal {

// The host backend between ranks that share memory. Each rank owns one segment, mapped by every
// rank: a few counters, each on its own cache line, and kSlots in- and out-slots. Data moves in
// slot-sized chunks, numbered across calls; a rank may run up to kSlots chunks ahead of the
// slowest. Per chunk a rank posts what its peers need into its in-slot (a single-phase step uses
// the in- and the out-slots in turn), waits until every peer posted, and reads from the peers'
// slots; a large all-reduce also publishes its reduced block
// in an out-slot (reduce-scatter, then all-gather by direct reads). Reductions read the ranks in
// rank order: every rank gets the same bits. Waiting spins briefly, then sleeps on a futex in
// the shared counter (woken by the writer only when someone sleeps).
class ShmBackend final : public CollectiveBackend {
 public:
  static constexpr int kSlots = 4;
  static constexpr size_t kSlotBytes = 256 * 1024;
  // All-reduces up to this size reduce everything on every rank in one step (one round of
  // synchronisation instead of two): a slot's worth for two ranks, a quarter of this for ranks
  // that share cores.
  static constexpr size_t kOneShotBytes = 64 * 1024;
  static size_t SegmentBytes();
  // How long a waiting rank spins (or yields, when ranks share cores) before it sleeps on the
  // futex. (Yielding early when every rank has a core made ranks convoy again: measured.)
  static constexpr absl::Duration kSpinBudget = absl::Milliseconds(1);
  // How many pause instructions a waiter spins through before it starts yielding its core.
  static constexpr int kPureSpins = 128;

  // `segments[r]` is rank r's segment (this rank's own at `rank`), all of SegmentBytes().
  ShmBackend(int rank, RankNames names, std::vector<SharedSegment> segments);
  ~ShmBackend() override;

  absl::Status Run(const CollectiveCall& call) override;
  void Abort() override;
  std::string Describe() const override;

 private:
  struct Counter;
  struct Segment;
  using CounterField = Counter Segment::*;

  Segment& Seg(int rank) const;
  uint8_t* InSlot(int rank, uint32_t chunk) const;
  uint8_t* OutSlot(int rank, uint32_t chunk) const;
  // Where a single-phase step puts chunk `chunk`: the in-slot and the out-slot in turn, every
  // kSlots chunks, so a slot is rewritten after twice as many chunks. Its peers' cached copies
  // of it are older by then, and writing it costs less (bench/allreduce_floor.cc, "ring":
  // 256 KiB at P = 2 in 24.2 instead of 26.9 us).
  uint8_t* StepSlot(int rank, uint32_t chunk) const;
  void Publish(CounterField field, uint32_t value);
  // Waits until every peer's `field` reached `target`.
  absl::Status WaitPeers(CounterField field, uint32_t target, const OpSignature& sig,
                         uint32_t first_chunk, absl::Time deadline);
  absl::Status CheckSignatures(uint32_t chunk, const OpSignature& sig);

  // One chunk of every operation but the two-phase all-reduce: post, wait for the peers' posts,
  // consume. `post` writes into this rank's in-slot; `consume` gets every rank's in-slot.
  template <typename Post, typename Consume>
  absl::Status Step(const OpSignature& sig, uint32_t first_chunk, absl::Time deadline, Post post,
                    Consume consume);
  // Step() over the call's count in chunks of `per_chunk` elements: post(slot, offset, len),
  // consume(slots, offset, len).
  template <typename Post, typename Consume>
  absl::Status Chunked(const CollectiveCall& call, size_t per_chunk, Post post, Consume consume);
  // Posts block j's [offset, offset + len) of `send` (size() blocks of `count`) at j * len in
  // `slot`, for every peer j (reduce-scatter, all-to-all).
  void PostBlocks(uint8_t* slot, const uint8_t* send, size_t count, size_t offset, size_t len,
                  size_t esize) const;

  absl::Status AllReduce(const CollectiveCall& call);
  absl::Status AllReduceTwoPhase(const CollectiveCall& call);
  absl::Status AllGather(const CollectiveCall& call);
  absl::Status ReduceScatter(const CollectiveCall& call);
  absl::Status Broadcast(const CollectiveCall& call);
  absl::Status AllToAll(const CollectiveCall& call);
  absl::Status Barrier(const CollectiveCall& call);

  const int rank_;
  const int size_;
  const RankNames names_;
  const std::vector<SharedSegment> segments_;
  const bool oversubscribed_;  // More ranks than cores.
  // Per-call scratch, sized once: the reduction's inputs and the peers' slots of a step.
  std::vector<const void*> inputs_;
  std::vector<const uint8_t*> slots_;
  uint32_t chunk_ = 0;  // The last chunk this rank started.
  std::atomic<bool> aborted_{false};
};

}  // namespace dist::internal
