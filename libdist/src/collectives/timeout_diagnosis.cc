#include "libdist/src/collectives/timeout_diagnosis.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "libdist/src/collectives/progress_reporter.h"

namespace dist::internal {
namespace {

using cohort::coordination::CollectiveProgress;
using cohort::coordination::TaskProgress;
using cohort::coordination::TaskState;

std::string Seconds(absl::Duration d) {
  const double s = absl::ToDoubleSeconds(d);
  return s < 10 ? absl::StrFormat("%.1f s", s) : absl::StrFormat("%.0f s", s);
}

}  // namespace

std::optional<std::string> DiagnoseTimeout(const TimeoutContext& ctx,
                                           const std::vector<TaskProgress>& table) {
  const uint64_t k = ctx.sig.seq;
  const uint64_t mine = SignatureHash(ctx.sig);
  const std::string call = ctx.sig.ToString();
  std::map<int, const TaskProgress*> by_process;
  for (const TaskProgress& t : table) by_process[t.task] = &t;

  struct NotEntered {
    std::string who;   // "process 7 is alive (heartbeat 0.4 s ago)"
    std::string last;  // "its last completed collective is #182"
  };
  std::vector<NotEntered> not_entered;
  std::vector<std::string> stopped, other_call, gone;
  int entered = 0;
  absl::Duration entered_for = ctx.waited;
  const int size = static_cast<int>(ctx.names.processes.size());
  int reported = 0;
  for (int r = 0; r < size; ++r) {
    const int process = ctx.names.processes[r];
    auto it = by_process.find(process);
    if (it == by_process.end()) continue;
    const TaskProgress& t = *it->second;
    const std::string name = absl::StrCat("process ", process);
    if (t.state == TaskState::kFailed || t.state == TaskState::kShutDown ||
        t.state == TaskState::kDisconnected) {
      gone.push_back(absl::StrCat(name, " (", cohort::coordination::TaskStateName(t.state), ")"));
      continue;
    }
    const CollectiveProgress* p = nullptr;
    for (const CollectiveProgress& c : t.communicators) {
      if (c.communicator == ctx.communicator) p = &c;
    }
    const std::string heartbeat =
        t.since_heartbeat ? absl::StrCat("heartbeat ", Seconds(*t.since_heartbeat), " ago")
                          : "no heartbeat yet";
    const bool stale =
        !t.since_report ||
        *t.since_report - t.since_heartbeat.value_or(absl::ZeroDuration()) > ctx.stale_after;
    if (r == ctx.rank) {
      ++entered;
      ++reported;
      continue;
    }
    ++reported;
    const uint64_t started = p ? p->last_started : 0;
    const uint64_t completed = p ? p->last_completed : 0;
    if (stale) {
      // Its last report is old: say what it had done by then, not what it is doing now.
      stopped.push_back(absl::StrCat(
          name, " is alive (", heartbeat, ") but its program ",
          t.since_report
              ? absl::StrCat("stopped reporting progress ", Seconds(*t.since_report), " ago")
              : "never reported progress",
          p ? absl::StrCat(", when it had entered #", started, " and completed #", completed) : "",
          ": it is stopped (SIGSTOP, a debugger) or stuck outside libdist"));
      if (started >= k) ++entered;
      continue;
    }
    if (started < k) {
      NotEntered n;
      n.who = absl::StrCat(name, " is alive (", heartbeat, ")");
      n.last = completed > 0 ? absl::StrCat("its last completed collective is #", completed)
                             : "it completed none on this communicator";
      not_entered.push_back(std::move(n));
      continue;
    }
    ++entered;
    if (p && started == k && !p->pending.empty()) {
      entered_for = std::max(entered_for, p->pending_for);
      if (p->pending_signature != mine) {
        other_call.push_back(absl::StrCat(name, " called ", p->pending));
        continue;
      }
    }
  }
  auto capped = [](std::vector<std::string> v) {
    if (v.size() > 3) {
      const size_t more = v.size() - 3;
      v.resize(3);
      v.push_back(absl::StrCat("and ", more, " more"));
    }
    return absl::StrJoin(v, "; ");
  };
  if (!gone.empty()) {
    return absl::StrCat(call, " cannot complete: ", capped(gone), " left the job");
  }
  if (!stopped.empty()) {
    return absl::StrCat(capped(stopped), "; ", entered, entered == 1 ? " process" : " processes",
                        " entered ", call, " ", Seconds(entered_for), " ago");
  }
  if (!not_entered.empty()) {
    const std::string others =
        absl::StrCat("the other ", entered, entered == 1 ? " process" : " processes", " entered ",
                     Seconds(entered_for), " ago");
    if (not_entered.size() == 1) {
      // "process 7 is alive (heartbeat 0.4 s ago) but never entered all_reduce #183, which the
      // other 7 processes entered 600 s ago; its last completed collective is #182"
      return absl::StrCat(not_entered[0].who, " but never entered ", call, ", which ", others, "; ",
                          not_entered[0].last);
    }
    std::vector<std::string> each;
    for (const NotEntered& n : not_entered) each.push_back(absl::StrCat(n.who, ", ", n.last));
    return absl::StrCat(not_entered.size(), " processes never entered ", call, ", which ", others,
                        ": ", capped(each));
  }
  if (!other_call.empty()) {
    return absl::StrCat("collective mismatch at #", k, ": ", ctx.names.Name(ctx.rank), " called ",
                        call, ", but ", capped(other_call));
  }
  if (reported == size) {
    return absl::StrCat("every process entered ", call, " and none completed it in ",
                        Seconds(entered_for),
                        ": no rank is missing, so suspect the transport (network, a device) "
                        "rather than a straggler");
  }
  return std::nullopt;
}

}  // namespace dist::internal
