// dist::Work: waiting for an asynchronous collective call.

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dist/collectives.h"
#include "libdist/src/collectives/communicator_impl.h"

namespace dist {
namespace {

// A waiter for an NCCL call looks at it this often: first with only a yield between looks (a
// look costs a cudaEventQuery, under a microsecond), then with sleeps.
constexpr int kSpinLooks = 2000;
constexpr absl::Duration kSleepBetweenLooks = absl::Microseconds(20);

// One look at an NCCL call through its communicator, when that still exists (else the
// communicator's destructor ends the call).
void Look(internal::WorkState& state) {
  absl::ReaderMutexLock lock(&state.anchor->mu);
  if (state.anchor->impl) state.anchor->impl->PollNccl();
}

bool Done(internal::WorkState& state) {
  absl::MutexLock lock(&state.mu);
  return state.done;
}

}  // namespace

uint64_t Work::sequence() const { return state_ ? state_->call.sig.seq : 0; }

bool Work::Test() {
  if (!state_) return true;
  if (Done(*state_)) return true;
  if (state_->on_nccl) Look(*state_);
  return Done(*state_);
}

absl::Status Work::Wait(std::optional<absl::Duration> timeout) {
  if (!state_) return absl::OkStatus();
  const absl::Time deadline = timeout ? absl::Now() + *timeout : absl::InfiniteFuture();
  if (state_->on_nccl) {
    for (int looks = 0; !Done(*state_); ++looks) {
      if (absl::Now() >= deadline) break;
      Look(*state_);
      if (Done(*state_)) break;
      if (looks < kSpinLooks) {
        std::this_thread::yield();
      } else {
        absl::SleepFor(kSleepBetweenLooks);
      }
    }
  }
  absl::MutexLock lock(&state_->mu);
  if (!state_->mu.AwaitWithDeadline(absl::Condition(&state_->done), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat(state_->call.sig.ToString(), " is still in flight after waiting ",
                     absl::FormatDuration(*timeout), "; it keeps running under its own timeout"));
  }
  return state_->status;
}

absl::Status Work::StreamWait(void* cuda_stream) {
  if (!state_) return absl::OkStatus();
  if (!state_->on_nccl) return Wait();
  absl::ReaderMutexLock lock(&state_->anchor->mu);
  if (state_->anchor->impl == nullptr) return Wait();
  return state_->anchor->impl->StreamWait(*state_, cuda_stream);
}

}  // namespace dist
