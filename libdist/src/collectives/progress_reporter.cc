#include "libdist/src/collectives/progress_reporter.h"

#include <pthread.h>

#include <algorithm>

#include "absl/synchronization/notification.h"

namespace dist::internal {

using cohort::coordination::CollectiveProgress;

uint64_t SignatureHash(const OpSignature& sig) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t v :
       {static_cast<uint64_t>(sig.kind), static_cast<uint64_t>(sig.type),
        static_cast<uint64_t>(sig.op), static_cast<uint64_t>(sig.root + 1), sig.count}) {
    h = (h ^ v) * 1099511628211ull;
  }
  return h;
}

// ---- ProgressReporter ---------------------------------------------------------------------

ProgressReporter& ProgressReporter::Get() {
  static ProgressReporter* reporter = new ProgressReporter();
  return *reporter;
}

uint64_t ProgressReporter::Add(JobHandle job, Snapshot snapshot) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  sources_.emplace_back(id, std::move(snapshot));
  job_ = std::move(job);
  kick_ = true;  // Known to the watchdog from the start, not only after the first interval.
  if (!thread_.joinable()) {
    const uint64_t generation = ++generation_;
    thread_ = std::thread([this, generation] { Loop(generation); });
  }
  return id;
}

void ProgressReporter::Remove(uint64_t id) {
  std::thread finished;
  {
    absl::MutexLock lock(&mu_);
    sources_.erase(std::remove_if(sources_.begin(), sources_.end(),
                                  [id](const auto& s) { return s.first == id; }),
                   sources_.end());
    if (!sources_.empty()) return;
    ++generation_;
    finished = std::move(thread_);
  }
  if (finished.joinable()) finished.join();
  absl::MutexLock lock(&mu_);
  if (sources_.empty()) job_.reset();  // Let the job's state go with its last communicator.
}

std::vector<CollectiveProgress> ProgressReporter::Collect() {
  std::vector<Snapshot> snapshots;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, s] : sources_) snapshots.push_back(s);
  }
  std::vector<CollectiveProgress> all;
  for (const Snapshot& s : snapshots) all.push_back(s());
  std::stable_partition(all.begin(), all.end(),
                        [](const CollectiveProgress& p) { return !p.pending.empty(); });
  if (all.size() > kMaxReported) all.resize(kMaxReported);
  return all;
}

void ProgressReporter::PushNow() {
  std::optional<JobHandle> job;
  {
    absl::MutexLock lock(&mu_);
    job = job_;
  }
  if (!job) return;
  auto sent = std::make_shared<absl::Notification>();
  job->client->ReportProgress(Collect(), [sent](absl::Status) { sent->Notify(); });
  sent->WaitForNotificationWithTimeout(absl::Seconds(2));
}

void ProgressReporter::Loop(uint64_t generation) {
  pthread_setname_np(pthread_self(), "dist-progress");
  struct Waiter {
    ProgressReporter* self;
    uint64_t generation;
    static bool Woken(Waiter* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return w->self->generation_ != w->generation || w->self->kick_;
    }
  } waiter{this, generation};
  while (true) {
    std::optional<JobHandle> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&Waiter::Woken, &waiter), kInterval);
      if (generation_ != generation) return;
      kick_ = false;
      job = job_;
    }
    if (job) job->client->ReportProgress(Collect(), [](absl::Status) {});
  }
}

}  // namespace dist::internal
