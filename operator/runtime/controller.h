#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "kube/informer.h"
#include "kube/kube_client.h"
#include "kube/work_queue.h"
#include "operator/reconciler/reconciler.h"
#include "operator/runtime/operator_metrics.h"

namespace cohort::op {

struct ControllerOptions {
  std::string ns;   // Namespace to watch; "" for all.
  int workers = 4;  // Jobs reconciled at once.
  absl::Duration watch_timeout = absl::Minutes(5);
};

// The operator's control loop: informers on DistributedJobs and on the pods the operator owns
// (label cohort.dev/job-name) put job keys on the de-duplicating work queue; workers reconcile
// them. A failed pass is retried with per-job exponential backoff (5 ms doubling to 5 min); a
// status-write conflict is retried at once; a pass may ask to be requeued later (backoff,
// deadlines, TTL).
class Controller {
 public:
  Controller(kube::KubeClient* client, Clock* clock, Reconciler* reconciler,
             OperatorMetrics* metrics, ControllerOptions options);
  ~Controller();  // Stop().

  // Queues a job ("<ns>/<name>") for a pass, as a watch event does.
  void Enqueue(const std::string& key) { queue_.Add(key); }
  void Start();
  // True once both informers delivered their first list.
  bool WaitForSync(absl::Duration timeout);
  void Stop();

 private:
  void Work();
  void Process(const std::string& key);

  kube::KubeClient* const client_;
  Reconciler* const reconciler_;
  OperatorMetrics* const metrics_;
  const ControllerOptions options_;
  kube::WorkQueue queue_;
  std::unique_ptr<kube::Informer> jobs_;
  std::unique_ptr<kube::Informer> pods_;
  std::vector<std::thread> workers_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> failures_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::op
