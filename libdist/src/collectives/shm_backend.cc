#include "libdist/src/collectives/shm_backend.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "libdist/src/collectives/copy.h"
#include "libdist/src/collectives/reduce.h"

namespace dist::internal {

// ---- Layout -------------------------------------------------------------------------------

// A counter only its owner writes; `waiters` counts the peers asleep on it.
struct alignas(64) ShmBackend::Counter {
  std::atomic<uint32_t> value;
  std::atomic<uint32_t> waiters;
};

struct alignas(64) SlotHeader {
  WireSignature sig;
};

// The head of each rank's segment. Chunk c uses slot c % kSlots.
//   posted           the last chunk whose in-slot is written;
//   consumed         the last chunk for which this rank is done reading its peers' in-slots;
//   reduced          the last chunk whose reduced block is in this rank's out-slot;
//   result_consumed  the last chunk for which this rank is done reading the peers' out-slots.
// A rank writes its in-slot for chunk c once every peer consumed c - kSlots, and its out-slot
// once every peer's result_consumed reached c - kSlots.
struct ShmBackend::Segment {
  Counter posted;
  Counter consumed;
  Counter reduced;
  Counter result_consumed;
  SlotHeader headers[kSlots];
};

namespace {

constexpr size_t kDataOffset = 4096;

bool Reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout) {
  const struct timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void Copy(void* dst, const void* src, size_t bytes) { CopyBytes(dst, src, bytes); }

}  // namespace

size_t ShmBackend::SegmentBytes() { return kDataOffset + 2 * kSlots * kSlotBytes; }

ShmBackend::ShmBackend(int rank, RankNames names, std::vector<SharedSegment> segments)
    : rank_(rank),
      size_(static_cast<int>(segments.size())),
      names_(std::move(names)),
      segments_(std::move(segments)),
      // With more ranks than cores, a waiting rank hands its core over (sched_yield: the rank
      // it waits for may be the one that runs next) instead of spinning on it.
      oversubscribed_(size_ > static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))),
      inputs_(size_),
      slots_(size_) {
  static_assert(sizeof(Segment) <= kDataOffset);
}

ShmBackend::~ShmBackend() = default;

std::string ShmBackend::Describe() const { return "host backend over shared memory"; }

ShmBackend::Segment& ShmBackend::Seg(int rank) const {
  return *reinterpret_cast<Segment*>(segments_[rank].data());
}

uint8_t* ShmBackend::InSlot(int rank, uint32_t chunk) const {
  return segments_[rank].data() + kDataOffset + (chunk % kSlots) * kSlotBytes;
}

uint8_t* ShmBackend::StepSlot(int rank, uint32_t chunk) const {
  return (chunk / kSlots) % 2 == 0 ? InSlot(rank, chunk) : OutSlot(rank, chunk);
}

uint8_t* ShmBackend::OutSlot(int rank, uint32_t chunk) const {
  return segments_[rank].data() + kDataOffset + (kSlots + chunk % kSlots) * kSlotBytes;
}

void ShmBackend::Publish(CounterField field, uint32_t value) {
  Counter& c = Seg(rank_).*field;
  c.value.store(value, std::memory_order_seq_cst);
  if (c.waiters.load(std::memory_order_seq_cst) > 0) FutexWake(&c.value);
}

void ShmBackend::Abort() {
  aborted_.store(true);
  for (int q = 0; q < size_; ++q) {
    for (CounterField f :
         {&Segment::posted, &Segment::consumed, &Segment::reduced, &Segment::result_consumed}) {
      FutexWake(&(Seg(q).*f).value);
    }
  }
}

absl::Status ShmBackend::WaitPeers(CounterField field, uint32_t target, const OpSignature& sig,
                                   uint32_t first_chunk, absl::Time deadline) {
  // How long one sleep lasts at most: a missed wake-up (an abort racing the sleep) costs this.
  constexpr absl::Duration kSleepSlice = absl::Milliseconds(100);
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    Counter& c = Seg(q).*field;
    if (Reached(c.value.load(std::memory_order_acquire), target)) continue;
    // Spin, then yield, for a while before sleeping: a futex wake-up takes 50-100 us on a VM,
    // and once one rank sleeps, its peer waits for that wake-up and then sleeps too (a convoy
    // that turns a 1 us step into a 100 us one). Time-based, so it means the same on every CPU.
    // Only the first few microseconds are pure spinning: a peer that has not answered by then
    // may be waiting for this very CPU (the scheduler put both ranks on one core, or another
    // process holds the peer's), and spinning would keep it off for the whole budget (1 ms a
    // step: measured 130x slower with both ranks on one CPU). sched_yield hands the core to it
    // and returns at once when no one else wants the core.
    const absl::Time spin_until = absl::Now() + kSpinBudget;
    for (int i = 1;; ++i) {
      if (oversubscribed_ || i > kPureSpins) {
        sched_yield();
      } else {
        CpuRelax();
      }
      if (Reached(c.value.load(std::memory_order_acquire), target)) break;
      if ((i & 255) == 0 && (aborted_.load() || absl::Now() >= spin_until)) break;
    }
    while (true) {
      uint32_t v = c.value.load(std::memory_order_acquire);
      if (Reached(v, target)) break;
      if (aborted_.load()) return absl::AbortedError("the communicator was aborted");
      const absl::Time now = absl::Now();
      if (now >= deadline) {
        std::vector<int> not_entered, inside;
        for (int p = 0; p < size_; ++p) {
          if (p == rank_) continue;
          if (Reached((Seg(p).*field).value.load(), target)) continue;
          (Reached(Seg(p).posted.value.load(), first_chunk) ? inside : not_entered).push_back(p);
        }
        std::string msg =
            absl::StrCat(sig.ToString(), " did not complete in time on ", names_.Name(rank_), ":");
        if (!not_entered.empty()) {
          absl::StrAppend(&msg, " ", names_.List(not_entered),
                          not_entered.size() == 1 ? " has" : " have", " not entered it");
        }
        if (!inside.empty()) {
          absl::StrAppend(&msg, not_entered.empty() ? " " : "; ", names_.List(inside),
                          inside.size() == 1 ? " is" : " are", " inside it but not done");
        }
        return absl::DeadlineExceededError(msg);
      }
      c.waiters.fetch_add(1, std::memory_order_seq_cst);
      v = c.value.load(std::memory_order_seq_cst);
      if (!Reached(v, target) && !aborted_.load()) {
        FutexWait(&c.value, v, std::min(kSleepSlice, deadline - now));
      }
      c.waiters.fetch_sub(1, std::memory_order_seq_cst);
    }
  }
  return absl::OkStatus();
}

absl::Status ShmBackend::CheckSignatures(uint32_t chunk, const OpSignature& sig) {
  const WireSignature mine = ToWire(sig);
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const WireSignature& wire = Seg(q).headers[chunk % kSlots].sig;
    if (std::memcmp(&wire, &mine, sizeof(mine)) == 0) continue;
    const OpSignature theirs = FromWire(wire);
    if (!theirs.SameCall(sig)) {
      return absl::FailedPreconditionError(
          absl::StrCat("collective mismatch: ", names_.Name(q), " called ", theirs.ToString(),
                       " while ", names_.Name(rank_), " called ", sig.ToString(),
                       "; every rank must call the same collectives in the same order"));
    }
  }
  return absl::OkStatus();
}

template <typename Post, typename Consume>
absl::Status ShmBackend::Step(const OpSignature& sig, uint32_t first_chunk, absl::Time deadline,
                              Post post, Consume consume) {
  const uint32_t c = ++chunk_;
  // Both the in- and the out-slot of c % kSlots are free once every peer is done reading the
  // chunks kSlots back (result_consumed comes after consumed in either kind of step).
  if (absl::Status s = WaitPeers(&Segment::result_consumed, c - kSlots, sig, first_chunk, deadline);
      !s.ok()) {
    return s;
  }
  Seg(rank_).headers[c % kSlots].sig = ToWire(sig);
  post(StepSlot(rank_, c));
  Publish(&Segment::posted, c);
  if (absl::Status s = WaitPeers(&Segment::posted, c, sig, first_chunk, deadline); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckSignatures(c, sig); !s.ok()) return s;
  for (int q = 0; q < size_; ++q) slots_[q] = StepSlot(q, c);
  consume(slots_.data());
  // Single-phase: nothing goes through the out-slots, so the three counters move together,
  // with one fence before looking for sleepers instead of one per counter.
  Segment& me = Seg(rank_);
  me.reduced.value.store(c, std::memory_order_release);
  me.result_consumed.value.store(c, std::memory_order_release);
  me.consumed.value.store(c, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (Counter* counter : {&me.reduced, &me.result_consumed, &me.consumed}) {
    if (counter->waiters.load(std::memory_order_relaxed) > 0) FutexWake(&counter->value);
  }
  return absl::OkStatus();
}

absl::Status ShmBackend::Run(const CollectiveCall& call) {
  if (aborted_.load()) return absl::AbortedError("the communicator was aborted");
  switch (call.sig.kind) {
    case CollectiveKind::kAllReduce:
      return AllReduce(call);
    case CollectiveKind::kAllGather:
      return AllGather(call);
    case CollectiveKind::kReduceScatter:
      return ReduceScatter(call);
    case CollectiveKind::kBroadcast:
      return Broadcast(call);
    case CollectiveKind::kAllToAll:
      return AllToAll(call);
    case CollectiveKind::kBarrier:
      return Barrier(call);
  }
  return absl::InvalidArgumentError("unknown collective");
}

absl::Status ShmBackend::AllReduce(const CollectiveCall& call) {
  const size_t esize = DataTypeSize(call.sig.type);
  const size_t count = call.sig.count;
  // Two ranks reduce a slot's worth in one step: reading both inputs costs less than the two
  // extra rounds of synchronisation. More ranks read more; they split the work sooner, and
  // sooner still when they share cores (then computing, not waiting, is what is scarce).
  const size_t one_shot = size_ == 2        ? kSlotBytes
                          : oversubscribed_ ? kOneShotBytes / 4
                                            : kOneShotBytes;
  if (count * esize > one_shot && size_ > 1) return AllReduceTwoPhase(call);
  // One shot: every rank posts its whole chunk and reduces all of them, in rank order.
  const auto* send = static_cast<const uint8_t*>(call.send);
  auto* recv = static_cast<uint8_t*>(call.recv);
  return Chunked(
      call, kSlotBytes / esize,
      [&](uint8_t* slot, size_t offset, size_t len) {
        Copy(slot, send + offset * esize, len * esize);
      },
      [&](const uint8_t* const* slots, size_t offset, size_t len) {
        for (int q = 0; q < size_; ++q) {
          inputs_[q] = q == rank_ ? send + offset * esize : slots[q];
        }
        ReduceInto(call.sig.type, call.sig.op, inputs_.data(), size_, recv + offset * esize, len,
                   size_);
      });
}

absl::Status ShmBackend::AllReduceTwoPhase(const CollectiveCall& call) {
  const DataType type = call.sig.type;
  const size_t esize = DataTypeSize(type);
  const size_t count = call.sig.count;
  const size_t per_chunk = kSlotBytes / esize;
  const size_t chunks = (count + per_chunk - 1) / per_chunk;
  const uint32_t first = chunk_ + 1;
  const auto* send = static_cast<const uint8_t*>(call.send);
  auto* recv = static_cast<uint8_t*>(call.recv);
  // Chunks go in groups of kSlots, each phase for the whole group before the next phase: a rank
  // waits three times per group instead of three times per chunk (what costs most when ranks
  // share cores), and the slots of a group were released by the group before it.
  for (size_t group = 0; group < chunks; group += kSlots) {
    const size_t in_group = std::min<size_t>(kSlots, chunks - group);
    const uint32_t base = chunk_;
    chunk_ += static_cast<uint32_t>(in_group);
    auto chunk_range = [&](size_t j) {
      const size_t offset = (group + j) * per_chunk;
      return Range{offset, std::min(per_chunk, count - offset)};
    };
    // 1. Post every block but this rank's own: each peer reduces its block from every slot.
    for (size_t j = 0; j < in_group; ++j) {
      const uint32_t c = base + 1 + static_cast<uint32_t>(j);
      const Range chunk = chunk_range(j);
      const Range mine = PartOf(chunk.size, size_, rank_);
      if (absl::Status s =
              WaitPeers(&Segment::consumed, c - kSlots, call.sig, first, call.deadline);
          !s.ok()) {
        return s;
      }
      Seg(rank_).headers[c % kSlots].sig = ToWire(call.sig);
      uint8_t* in_slot = InSlot(rank_, c);
      const uint8_t* src = send + chunk.begin * esize;
      Copy(in_slot, src, mine.begin * esize);
      const size_t after = mine.begin + mine.size;
      Copy(in_slot + after * esize, src + after * esize, (chunk.size - after) * esize);
      Publish(&Segment::posted, c);
    }
    // 2. Reduce this rank's block of each chunk, in rank order, into the out-slot and recv.
    for (size_t j = 0; j < in_group; ++j) {
      const uint32_t c = base + 1 + static_cast<uint32_t>(j);
      const Range chunk = chunk_range(j);
      const Range mine = PartOf(chunk.size, size_, rank_);
      if (absl::Status s = WaitPeers(&Segment::posted, c, call.sig, first, call.deadline);
          !s.ok()) {
        return s;
      }
      if (absl::Status s = CheckSignatures(c, call.sig); !s.ok()) return s;
      if (absl::Status s =
              WaitPeers(&Segment::result_consumed, c - kSlots, call.sig, first, call.deadline);
          !s.ok()) {
        return s;
      }
      const uint8_t* src = send + chunk.begin * esize;
      for (int q = 0; q < size_; ++q) {
        inputs_[q] = (q == rank_ ? src : InSlot(q, c)) + mine.begin * esize;
      }
      uint8_t* out_block = OutSlot(rank_, c) + mine.begin * esize;
      ReduceInto(type, call.sig.op, inputs_.data(), size_, out_block, mine.size, size_);
      Publish(&Segment::consumed, c);
      Copy(recv + (chunk.begin + mine.begin) * esize, out_block, mine.size * esize);
      Publish(&Segment::reduced, c);
    }
    // 3. Gather the peers' reduced blocks.
    for (size_t j = 0; j < in_group; ++j) {
      const uint32_t c = base + 1 + static_cast<uint32_t>(j);
      const Range chunk = chunk_range(j);
      if (absl::Status s = WaitPeers(&Segment::reduced, c, call.sig, first, call.deadline);
          !s.ok()) {
        return s;
      }
      uint8_t* dst = recv + chunk.begin * esize;
      for (int q = 0; q < size_; ++q) {
        if (q == rank_) continue;
        const Range r = PartOf(chunk.size, size_, q);
        Copy(dst + r.begin * esize, OutSlot(q, c) + r.begin * esize, r.size * esize);
      }
      Publish(&Segment::result_consumed, c);
    }
  }
  return absl::OkStatus();
}

absl::Status ShmBackend::AllGather(const CollectiveCall& call) {
  const size_t esize = DataTypeSize(call.sig.type);
  const size_t count = call.sig.count;  // Per rank.
  const auto* send = static_cast<const uint8_t*>(call.send);
  auto* recv = static_cast<uint8_t*>(call.recv);
  return Chunked(
      call, kSlotBytes / esize,
      [&](uint8_t* slot, size_t offset, size_t len) {
        Copy(slot, send + offset * esize, len * esize);
      },
      [&](const uint8_t* const* slots, size_t offset, size_t len) {
        for (int q = 0; q < size_; ++q) {
          const uint8_t* from = q == rank_ ? send + offset * esize : slots[q];
          Copy(recv + (q * count + offset) * esize, from, len * esize);
        }
      });
}

absl::Status ShmBackend::ReduceScatter(const CollectiveCall& call) {
  const size_t esize = DataTypeSize(call.sig.type);
  const size_t count = call.sig.count;  // Per rank.
  const auto* send = static_cast<const uint8_t*>(call.send);
  auto* recv = static_cast<uint8_t*>(call.recv);
  return Chunked(
      call, std::max<size_t>(1, kSlotBytes / (esize * size_)),
      [&](uint8_t* slot, size_t offset, size_t len) {
        PostBlocks(slot, send, count, offset, len, esize);
      },
      [&](const uint8_t* const* slots, size_t offset, size_t len) {
        for (int q = 0; q < size_; ++q) {
          inputs_[q] =
              q == rank_ ? send + (rank_ * count + offset) * esize : slots[q] + rank_ * len * esize;
        }
        ReduceInto(call.sig.type, call.sig.op, inputs_.data(), size_, recv + offset * esize, len,
                   size_);
      });
}

absl::Status ShmBackend::Broadcast(const CollectiveCall& call) {
  const size_t esize = DataTypeSize(call.sig.type);
  const int root = call.sig.root;
  const auto* send = static_cast<const uint8_t*>(call.send);
  auto* recv = static_cast<uint8_t*>(call.recv);
  return Chunked(
      call, kSlotBytes / esize,
      [&](uint8_t* slot, size_t offset, size_t len) {
        if (rank_ == root) Copy(slot, send + offset * esize, len * esize);
      },
      [&](const uint8_t* const* slots, size_t offset, size_t len) {
        const uint8_t* from = rank_ == root ? send + offset * esize : slots[root];
        Copy(recv + offset * esize, from, len * esize);
      });
}

absl::Status ShmBackend::AllToAll(const CollectiveCall& call) {
  const size_t esize = DataTypeSize(call.sig.type);
  const size_t count = call.sig.count;  // Per peer.
  const auto* send = static_cast<const uint8_t*>(call.send);
  auto* recv = static_cast<uint8_t*>(call.recv);
  return Chunked(
      call, std::max<size_t>(1, kSlotBytes / (esize * size_)),
      [&](uint8_t* slot, size_t offset, size_t len) {
        PostBlocks(slot, send, count, offset, len, esize);
      },
      [&](const uint8_t* const* slots, size_t offset, size_t len) {
        for (int q = 0; q < size_; ++q) {
          const uint8_t* from =
              q == rank_ ? send + (rank_ * count + offset) * esize : slots[q] + rank_ * len * esize;
          Copy(recv + (q * count + offset) * esize, from, len * esize);
        }
      });
}

void ShmBackend::PostBlocks(uint8_t* slot, const uint8_t* send, size_t count, size_t offset,
                            size_t len, size_t esize) const {
  for (int j = 0; j < size_; ++j) {
    if (j != rank_) Copy(slot + j * len * esize, send + (j * count + offset) * esize, len * esize);
  }
}

absl::Status ShmBackend::Barrier(const CollectiveCall& call) {
  return Chunked(
      call, 1, [](uint8_t*, size_t, size_t) {}, [](const uint8_t* const*, size_t, size_t) {});
}

template <typename Post, typename Consume>
absl::Status ShmBackend::Chunked(const CollectiveCall& call, size_t per_chunk, Post post,
                                 Consume consume) {
  const uint32_t first = chunk_ + 1;
  size_t offset = 0;
  do {  // At least one chunk, also for a count of 0: every call synchronises and is checked.
    const size_t len = std::min(per_chunk, call.sig.count - offset);
    absl::Status s = Step(
        call.sig, first, call.deadline, [&](uint8_t* slot) { post(slot, offset, len); },
        [&](const uint8_t* const* slots) { consume(slots, offset, len); });
    if (!s.ok()) return s;
    offset += len;
  } while (offset < call.sig.count);
  return absl::OkStatus();
}

}  // namespace dist::internal
