#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "cohort/coordination/v1/attempts.pb.h"
#include "common/hang_evidence.h"
#include "sidecar/metrics/sidecar_metrics.h"

// What a pod's sidecar tells the job's hang detector (docs/faults.md, "Hung ranks"): every
// second, how far each of its ranks got, from the Python start-up hook's status file
// (launcher/python_probe) or from libdist's step reports; and, when the hub asks for evidence of a
// hang, the ranks' stacks, collected into the cohort-agent directory and printed in the log.
//
//   hook --<probe dir>/status.json--> ProgressWatch --ReportHealth--> the attempt hub
//   hub --AttemptOrder.dump_id--> ProgressWatch --<probe dir>/dump-request--> hook
//   hook --<dumps>/attempt-N/rank-R/stacks.txt, <probe dir>/dumped--> ProgressWatch --dumped_id-->
//   hub
//
// A process without the hook but with libdist attached is asked through `ask_process` (its
// Attach stream) and answers in <dumps>/attempt-N/rank-R/dumped.
namespace cohort::sidecar {

namespace attemptspb = ::cohort::coordination::v1;

// A process's status.json (hang_evidence.h) as `now` reads it: nullopt when it is not an object,
// or a leftover (written longer than hang_evidence::kLeftoverStatus ago, or by a process started
// before `not_before`, the attempt's start).
std::optional<attemptspb::RankHealth> ParseProbeStatus(
    const std::string& text, absl::Time now, absl::Time not_before = absl::InfinitePast());

class ProgressWatch {
 public:
  struct Options {
    std::string agent_socket;  // The pod's (env::ProbeDir and env::DumpsDir are beside it).
    int32_t first_rank = 0;    // Until SetAttempt says otherwise.
    int32_t processes_per_pod = 1;
    int32_t pod_index = 0;
    // Each local rank's libdist step reports (index = local rank; null: none).
    std::vector<SidecarMetrics*> metrics;
    absl::Duration period = hang_evidence::kReportPeriod;
    // Asks local rank `local`'s libdist for the evidence of hang `id` in `directory`; false when
    // no libdist process is attached there. Null: only hooks are asked.
    std::function<bool(int local, uint64_t id, const std::string& directory)> ask_process;
    // How long the ranks get to write their stacks after a dump order: the one wait for the
    // evidence (hang_evidence.h), less two report periods, so that what they wrote reaches the
    // hub before it stops waiting.
    absl::Duration dump_patience =
        hang_evidence::kEvidencePatience - 2 * hang_evidence::kReportPeriod;
  };

  explicit ProgressWatch(Options options);
  ~ProgressWatch();  // Stop()s.
  // Starts the thread that sends a report each period through `send` (rank 0: to the hub in
  // process; the others: ReportHealth) and collects the evidence asked for.
  void Start(std::function<void(const attemptspb::ReportHealthRequest&)> send);
  // Ends that thread (before what `send` uses goes).
  void Stop();
  ProgressWatch(const ProgressWatch&) = delete;
  ProgressWatch& operator=(const ProgressWatch&) = delete;

  // The pod's processes run `attempt` from now on (their steps count from here), as ranks
  // `first_rank` onwards (an elastic job's attempt may place the pod elsewhere); nullopt: the
  // attempt runs without this pod (nothing to report until the next).
  void SetAttempt(int32_t attempt, std::optional<int32_t> first_rank);
  // Every process of the pod's `attempt` ended (cohort-launch said so): none is reported until
  // the next attempt, so that what they last said does not age into a hang.
  void AttemptEnded(int32_t attempt);
  // The hub asks for the evidence of hang `dump_id` in `attempt` (a repeated id is ignored).
  void Dump(uint64_t dump_id, int32_t attempt);

  // One report as of `now` (what the thread sends each period); public for tests.
  attemptspb::ReportHealthRequest Collect(absl::Time now);

 private:
  struct PendingDump {
    uint64_t id;
    int32_t attempt;
    absl::Time asked_at;
    struct Asked {
      int32_t local;
      std::string answer;  // The file its answer ("<id> <summary>") appears in.
      bool hook;           // The start-up hook writes it (else libdist).
    };
    std::vector<Asked> asked;
  };
  void Loop(const std::function<void(const attemptspb::ReportHealthRequest&)>& send);
  // Writes the dump requests of `d` and notes which ranks will answer.
  void Ask(PendingDump& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True once every asked rank answered or the patience ran out; then logs what was collected.
  bool Collected(PendingDump& d, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string ProbeDirOf(int local) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  absl::Mutex mu_;
  int32_t attempt_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t first_rank_ ABSL_GUARDED_BY(mu_);  // Of attempt_'s ranks of this pod.
  absl::Time attempt_started_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool attempt_ended_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int64_t> advances_at_attempt_ ABSL_GUARDED_BY(mu_);  // libdist steps before it.
  std::optional<PendingDump> dump_ ABSL_GUARDED_BY(mu_);
  uint64_t dumped_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace cohort::sidecar
