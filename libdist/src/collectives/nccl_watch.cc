#include "libdist/src/collectives/nccl_watch.h"

#include <pthread.h>

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "libdist/src/collectives/communicator_impl.h"

namespace dist::internal {

NcclWatch& NcclWatch::Get() {
  static NcclWatch* watch = new NcclWatch();  // Never destroyed: its thread may outlive main.
  return *watch;
}

void NcclWatch::Watch(std::shared_ptr<CommunicatorAnchor> anchor) {
  absl::MutexLock lock(&mu_);
  Watched& w = watched_[anchor.get()];
  w.anchor = std::move(anchor);
  ++w.kicks;
  if (!running_) {
    running_ = true;
    std::thread([this] { Loop(); }).detach();
  }
}

void NcclWatch::Loop() {
  pthread_setname_np(pthread_self(), "dist-nccl-watch");
  while (true) {
    std::vector<std::pair<CommunicatorAnchor*, Watched>> look;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](std::map<CommunicatorAnchor*, Watched>* w) { return !w->empty(); }, &watched_));
      look.assign(watched_.begin(), watched_.end());
    }
    for (auto& [key, w] : look) {
      bool in_flight = false;
      {
        absl::ReaderMutexLock lock(&w.anchor->mu);
        if (w.anchor->impl) in_flight = w.anchor->impl->PollNccl(/*watch_thread=*/true);
      }
      if (in_flight) continue;
      absl::MutexLock lock(&mu_);
      auto it = watched_.find(key);
      if (it != watched_.end() && it->second.kicks == w.kicks) watched_.erase(it);
    }
    absl::SleepFor(kTick);
  }
}

}  // namespace dist::internal
