#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "dist/distributed.h"

namespace dist::internal {

// libdist's own reactions to a job failure, run in the order they were added and before the
// program's Options::on_peer_failure: e.g. "abort every communicator", so that no collective of
// the program is still waiting on a dead peer when its handler runs (or when the default handler
// exits). Each handler runs on a thread of its own and gets at most its time bound; one that
// overruns is logged and left running, and the next one starts. RunAll() is called off the
// thread that delivers job events, so a slow handler never delays the events behind it.
//
// Thread-safe.
class FailureHandlers {
 public:
  using Handler = std::function<void(const PeerFailure&)>;
  using Id = uint64_t;

  explicit FailureHandlers(cohort::Clock* clock = cohort::Clock::Real()) : clock_(clock) {}
  FailureHandlers(const FailureHandlers&) = delete;
  FailureHandlers& operator=(const FailureHandlers&) = delete;

  // Adds a handler after those added before. `name` appears in the log when it overruns `bound`.
  Id Add(std::string name, absl::Duration bound, Handler handler);
  // Removes a handler (a communicator destroyed before any failure); unknown ids are ignored.
  void Remove(Id id);
  // Runs every handler in order, each for at most its bound, and returns when the last one
  // finished or overran.
  void RunAll(const PeerFailure& failure);

 private:
  struct Entry {
    Id id;
    std::string name;
    absl::Duration bound;
    Handler handler;
  };
  cohort::Clock* const clock_;
  absl::Mutex mu_;
  Id last_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// The handlers of the initialized job (dist::Initialize() until dist::Shutdown()).
// FailedPrecondition when libdist is not initialized.
absl::StatusOr<FailureHandlers::Id> AddFailureHandler(std::string name, absl::Duration bound,
                                                      FailureHandlers::Handler handler);
void RemoveFailureHandler(FailureHandlers::Id id);

}  // namespace dist::internal
