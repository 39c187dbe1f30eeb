#include "sidecar/progress_watch.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/env.h"
#include "common/files.h"
#include "common/hang_evidence.h"
#include "common/log.h"
#include "common/shared_dir.h"

namespace cohort::sidecar {
namespace {

// How much of a rank's stacks the log shows (the whole file stays in the dumps directory).
constexpr size_t kLoggedStacks = 16 * 1024;

// The hook's status file of one process (ParseProbeStatus); nullopt when there is none.
std::optional<attemptspb::RankHealth> ReadStatus(const std::string& path, absl::Time now,
                                                 absl::Time not_before = absl::InfinitePast()) {
  std::optional<std::string> text = ReadFile(path);
  if (!text) return std::nullopt;
  return ParseProbeStatus(*text, now, not_before);
}

// The id the hook answered in <probe dir>/dumped ("<id> <summary>"), and its summary.
std::optional<std::pair<uint64_t, std::string>> ReadDumped(const std::string& path) {
  std::optional<std::string> text = ReadFile(path);
  if (!text) return std::nullopt;
  absl::string_view line = absl::StripTrailingAsciiWhitespace(*text);
  std::pair<absl::string_view, absl::string_view> parts =
      absl::StrSplit(line, absl::MaxSplits(' ', 1));
  uint64_t id = 0;
  if (!absl::SimpleAtoi(parts.first, &id)) return std::nullopt;
  return std::make_pair(id, std::string(parts.second));
}

}  // namespace

std::optional<attemptspb::RankHealth> ParseProbeStatus(const std::string& text, absl::Time now,
                                                       absl::Time not_before) {
  namespace status = hang_evidence::status;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto num = [&](const char* key) -> int64_t {
    auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<int64_t>() : 0;
  };
  auto str = [&](const char* key) -> std::string {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : "";
  };
  auto flag = [&](const char* key) -> bool {
    auto it = j.find(key);
    return it != j.end() && it->is_boolean() && it->get<bool>();
  };
  const absl::Time written = absl::FromUnixMillis(num(status::kUnixMs));
  if (now - written > hang_evidence::kLeftoverStatus ||
      absl::FromUnixMillis(num(status::kStartedUnixMs)) < not_before)
    return std::nullopt;
  attemptspb::RankHealth h;
  h.set_source("python");
  h.set_steps(num(status::kSteps));
  const int64_t last_step = num(status::kLastStepUnixMs);
  const absl::Time progress_at =
      absl::FromUnixMillis(last_step > 0 ? last_step : num(status::kStartedUnixMs));
  h.set_progress_age_ms(std::max<int64_t>(0, absl::ToInt64Milliseconds(now - progress_at)));
  h.set_median_step_ms(num(status::kMedianStepMs));
  h.set_report_age_ms(std::max<int64_t>(0, absl::ToInt64Milliseconds(now - written)));
  h.set_phase(str(status::kPhase));
  h.set_busy(flag(status::kBusy));
  h.set_waiting(flag(status::kWaiting));
  h.set_op(str(status::kOp));
  h.set_where(str(status::kWhere));
  return h;
}

ProgressWatch::ProgressWatch(Options options) : options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  first_rank_ = options_.first_rank;
  advances_at_attempt_.assign(options_.metrics.size(), 0);
}

ProgressWatch::~ProgressWatch() { Stop(); }

void ProgressWatch::Start(std::function<void(const attemptspb::ReportHealthRequest&)> send) {
  thread_ = std::thread([this, send = std::move(send)] { Loop(send); });
}

void ProgressWatch::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

std::string ProgressWatch::ProbeDirOf(int local) const {
  return env::ProbeDir(options_.agent_socket, first_rank_ + local);
}

void ProgressWatch::SetAttempt(int32_t attempt, std::optional<int32_t> first_rank) {
  absl::MutexLock lock(&mu_);
  if (attempt == attempt_) return;
  attempt_ = attempt;
  attempt_started_at_ = absl::Now();
  // An attempt that runs without this pod has nothing to report, as one whose processes ended.
  attempt_ended_ = !first_rank.has_value();
  if (first_rank) first_rank_ = *first_rank;
  for (size_t i = 0; i < options_.metrics.size(); ++i) {
    advances_at_attempt_[i] = options_.metrics[i] ? options_.metrics[i]->Steps().advances : 0;
  }
}

void ProgressWatch::AttemptEnded(int32_t attempt) {
  absl::MutexLock lock(&mu_);
  if (attempt == attempt_) attempt_ended_ = true;
}

void ProgressWatch::Dump(uint64_t dump_id, int32_t attempt) {
  absl::MutexLock lock(&mu_);
  if (dump_id == 0 || dump_id == dumped_id_ || (dump_ && dump_->id == dump_id)) return;
  dump_ = PendingDump{dump_id, attempt, absl::Now(), {}};
  Ask(*dump_);
}

void ProgressWatch::Ask(PendingDump& d) {
  const std::string base =
      absl::StrCat(env::DumpsDir(options_.agent_socket), "/attempt-", d.attempt);
  for (int local = 0; local < options_.processes_per_pod; ++local) {
    const int32_t rank = first_rank_ + local;
    const std::string dir = absl::StrCat(base, "/rank-", rank);
    MakeSharedDirectories(dir,
                          env::DumpsDir(options_.agent_socket));  // The trainer's uid may differ.
    const std::string probe = ProbeDirOf(local);
    // Only a live hook answers: one that wrote its status lately.
    if (ReadStatus(absl::StrCat(probe, "/", hang_evidence::kStatusFile), absl::Now(),
                   attempt_started_at_)) {
      if (absl::Status s =
              WriteFileAtomically(absl::StrCat(probe, "/", hang_evidence::kDumpRequestFile),
                                  absl::StrCat(d.id, " ", dir, "\n"));
          s.ok()) {
        d.asked.push_back(
            {local, absl::StrCat(probe, "/", hang_evidence::kDumpedFile), /*hook=*/true});
      } else {
        LogWarning("hang ", d.id, ": cannot ask rank ", rank, " for its stacks: ", s.message());
      }
    } else if (options_.ask_process && options_.ask_process(local, d.id, dir)) {
      d.asked.push_back(
          {local, absl::StrCat(dir, "/", hang_evidence::kDumpedFile), /*hook=*/false});
    }
  }
  LogWarning(
      "hang ", d.id, ": the job's hang detector asked for evidence; ", d.asked.size(), " of ",
      options_.processes_per_pod,
      " process(es) of this pod (with the start-up hook or libdist) write their stacks into ",
      base);
}

bool ProgressWatch::Collected(PendingDump& d, absl::Time now) {
  const std::string base =
      absl::StrCat(env::DumpsDir(options_.agent_socket), "/attempt-", d.attempt);
  auto answer_of = [&](const PendingDump::Asked& a) -> std::optional<std::string> {
    std::optional<std::pair<uint64_t, std::string>> answer = ReadDumped(a.answer);
    if (!answer || answer->first != d.id) return std::nullopt;
    return answer->second;
  };
  const bool all = std::all_of(d.asked.begin(), d.asked.end(),
                               [&](const auto& a) { return answer_of(a).has_value(); });
  if (!all && now - d.asked_at < options_.dump_patience) return false;
  for (const PendingDump::Asked& a : d.asked) {
    const int32_t rank = first_rank_ + a.local;
    const std::string dir = absl::StrCat(base, "/rank-", rank);
    std::optional<std::string> answer = answer_of(a);
    if (!answer) {
      LogWarning("hang ", d.id, ": rank ", rank, " wrote no stacks within ",
                 absl::FormatDuration(options_.dump_patience),
                 a.hook ? " (its hook could not run: a C call holding Python's lock, or the "
                          "process is stopped)"
                        : " (the process is stopped, or its threads cannot run)",
                 "; see ", dir, " for what it may still write");
      continue;
    }
    std::string stacks = ReadFile(absl::StrCat(dir, "/", hang_evidence::kStacksFile)).value_or("");
    if (stacks.size() > kLoggedStacks) {
      stacks.resize(kLoggedStacks);
      absl::StrAppend(&stacks, "\n... (the rest in ", dir, "/", hang_evidence::kStacksFile, ")");
    }
    LogWarning("hang ", d.id, ": rank ", rank, ": ", *answer, " (evidence in ", dir, "):\n",
               stacks);
  }
  return true;
}

attemptspb::ReportHealthRequest ProgressWatch::Collect(absl::Time now) {
  attemptspb::ReportHealthRequest report;
  report.set_pod_index(options_.pod_index);
  absl::MutexLock lock(&mu_);
  report.set_attempt(attempt_);
  report.set_dumped_id(dumped_id_);
  for (int local = 0; local < options_.processes_per_pod && !attempt_ended_; ++local) {
    const int32_t rank = first_rank_ + local;
    std::optional<attemptspb::RankHealth> h = ReadStatus(
        absl::StrCat(ProbeDirOf(local), "/", hang_evidence::kStatusFile), now, attempt_started_at_);
    if (!h && static_cast<size_t>(local) < options_.metrics.size() &&
        options_.metrics[local] != nullptr) {
      // libdist's step reports (dist::ReportProgress, cohort.report_progress).
      const SidecarMetrics::StepSummary steps = options_.metrics[local]->Steps();
      const int64_t advances = steps.advances - advances_at_attempt_[local];
      if (advances > 0) {
        h.emplace();
        h->set_source("libdist");
        h->set_steps(advances);
        h->set_progress_age_ms(absl::ToInt64Milliseconds(now - steps.last_at));
        h->set_median_step_ms(absl::ToInt64Milliseconds(steps.median));
        h->set_phase("run");
        // libdist reports its collectives every 500 ms: a process that stopped (SIGSTOP, a
        // debugger) stops reporting; one with a call in flight waits in it.
        if (steps.reported_at != absl::InfinitePast()) {
          h->set_report_age_ms(
              std::max<int64_t>(0, absl::ToInt64Milliseconds(now - steps.reported_at)));
        }
        if (!steps.pending.empty()) {
          h->set_waiting(true);
          h->set_op(steps.pending);
        }
      }
    }
    if (!h) continue;  // Nothing known of it: it is not judged.
    h->set_rank(rank);
    h->set_local(local);
    *report.add_ranks() = *std::move(h);
  }
  return report;
}

void ProgressWatch::Loop(const std::function<void(const attemptspb::ReportHealthRequest&)>& send) {
  pthread_setname_np(pthread_self(), "health-watch");
  while (!stop_.WaitForNotificationWithTimeout(options_.period)) {
    const absl::Time now = absl::Now();
    {
      absl::MutexLock lock(&mu_);
      if (dump_ && Collected(*dump_, now)) {
        dumped_id_ = dump_->id;
        dump_.reset();
      }
    }
    attemptspb::ReportHealthRequest report = Collect(now);
    send(report);
  }
}

}  // namespace cohort::sidecar
