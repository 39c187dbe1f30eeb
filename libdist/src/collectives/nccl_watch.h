#pragma once

// The process's one watch thread for asynchronous NCCL calls (PyTorch's ProcessGroupNCCL
// watchdog, in Cohort's terms): while any communicator has NCCL calls in flight, it looks at
// them about every millisecond (CommunicatorImpl::PollNccl: end events, NCCL's asynchronous
// error, deadlines, Abort()), so calls end, progress is reported and timeouts fail the job even
// when the program never waits. It sleeps while nothing is in flight.

#include <cstdint>
#include <map>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dist::internal {

struct CommunicatorAnchor;

class NcclWatch {
 public:
  static constexpr absl::Duration kTick = absl::Milliseconds(1);

  static NcclWatch& Get();
  // Watches `anchor`'s communicator until it has no NCCL call in flight. Thread-safe.
  void Watch(std::shared_ptr<CommunicatorAnchor> anchor);

 private:
  NcclWatch() = default;
  void Loop();

  struct Watched {
    std::shared_ptr<CommunicatorAnchor> anchor;
    uint64_t kicks = 0;  // Watch() calls; an entry goes only when none came during a look.
  };
  absl::Mutex mu_;
  std::map<CommunicatorAnchor*, Watched> watched_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dist::internal
