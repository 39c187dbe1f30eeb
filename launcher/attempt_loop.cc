#include "launcher/attempt_loop.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process/launch_protocol.h"

namespace cohort {
namespace {

std::set<std::string> ListDir(const std::string& dir) {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    names.insert(e.path().filename().string());
  return names;
}

}  // namespace

int ConnectLaunchSocket(absl::Duration patience) {
  std::optional<std::string> path = env::Get(env::kLaunchSocket);
  if (!path) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path->c_str(), sizeof(addr.sun_path) - 1);
  const absl::Time give_up = absl::Now() + patience;
  while (true) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    if (fd >= 0) close(fd);
    if (absl::Now() >= give_up) {
      std::cerr << kLauncherName << ": cannot reach the sidecar's launch socket " << *path << " ("
                << std::strerror(errno) << "): this pod's processes will not restart in place\n";
      return -1;
    }
    absl::SleepFor(
        absl::Milliseconds(50));  // The sidecar is starting: no notification to wait for.
  }
}

AttemptLoop::AttemptLoop(ProcessGroup& group, env::ProcessPlacement pod, int32_t first_attempt,
                         int fd, Options options)
    : group_(group),
      pod_(pod),
      attempt_(first_attempt),
      fd_(fd),
      from_sidecar_(fd),
      options_(std::move(options)),
      shm_before_(options_.shm_dir.empty() ? std::set<std::string>() : ListDir(options_.shm_dir)) {}

AttemptLoop::~AttemptLoop() {
  if (fd_ >= 0) close(fd_);
}

int AttemptLoop::Run() {
  AttemptOutcome out;
  int exit_code = 1;
  while (state_ != State::kDone) {
    switch (state_) {
      case State::kAwaitingOrder: {
        const std::string waiting =
            ran_ ? ""
            : options_.spare
                ? absl::StrCat(kLauncherName,
                               ": a spare pod: waiting for the sidecar to give it the slot of a "
                               "pod that is gone")
                : absl::StrCat(kLauncherName, ": restart attempt ", attempt_,
                               " waits for its order from the sidecar (this pod replaces one "
                               "alone: the others end the last attempt first)");
        std::optional<int32_t> go = AwaitOrder(ran_ ? attempt_ + 1 : attempt_, waiting);
        if (!go) {
          if (!ran_ && !signalled_) {
            std::cerr << kLauncherName
                      << ": the pod's sidecar closed the launch socket before it ordered restart "
                         "attempt "
                      << attempt_ << ": its log says why\n";
          }
          exit_code = ran_ ? out.exit_code : signalled_ ? 128 + SIGTERM : 1;
          state_ = State::kDone;
          break;
        }
        attempt_ = *go;
        shape_ = ordered_;
        if (shape_.idle) {
          // An elastic job's attempt without this pod's replica group: it waits to rejoin.
          ProcessGroup::Print(absl::StrCat(
              kLauncherName, ": restart attempt ", attempt_,
              " runs without this pod (its replica group is left out); waiting for a later one"));
          ran_ = true;
          break;
        }
        if (ran_) {
          ProcessGroup::Print(
              absl::StrCat(kLauncherName, ": starting restart attempt ", *go, " in place"));
        }
        state_ = State::kRunning;
        break;
      }
      case State::kRunning:
        out = RunOne();
        ran_ = true;
        if (out.superseded) {
          // Nobody waits for this attempt's end any more: the next one starts.
          CleanShm();
          attempt_ = *out.superseded;
          shape_ = ordered_;
          if (shape_.idle) {
            ProcessGroup::Print(absl::StrCat(
                kLauncherName, ": restart attempt ", attempt_,
                " runs without this pod (its replica group is left out); waiting for a later one"));
            state_ = State::kAwaitingOrder;
            break;
          }
          ProcessGroup::Print(
              absl::StrCat(kLauncherName, ": starting restart attempt ", attempt_, " in place"));
        } else if (out.exit_code == 0 || out.signalled) {
          if (!out.cause.empty())
            ProcessGroup::Print(absl::StrCat(kLauncherName, ": exiting with ", out.cause));
          exit_code = out.exit_code;
          state_ = State::kDone;
        } else {
          state_ = State::kReportingEnd;
        }
        break;
      case State::kReportingEnd:
        CleanShm();
        exit_code = out.exit_code;
        state_ = ReportEnd(out) ? State::kAwaitingOrder : State::kDone;
        break;
      case State::kDone:
        break;
    }
  }
  return exit_code;
}

std::optional<int32_t> AttemptLoop::NextOrder(const std::vector<std::string>& lines,
                                              int32_t least) {
  std::optional<launch::AttemptOrder> next;
  for (const std::string& l : lines) {
    std::optional<launch::AttemptOrder> o = launch::ParseOrder(l);
    if (!o || o->attempt < least || (next && o->attempt <= next->attempt)) continue;
    if (o->pod_index && (*o->pod_index < 0 || *o->pod_index >= pod_.num_pods)) {
      ProcessGroup::Print(absl::StrCat(kLauncherName, ": the sidecar ordered restart attempt ",
                                       o->attempt, " as pod ", *o->pod_index, ", but the job has ",
                                       pod_.num_pods, " pods: ignored"));
      continue;
    }
    if (!o->pod_index && pod_.pod_index < 0)
      continue;  // A spare runs nothing until it holds a slot.
    next = o;
  }
  if (!next) return std::nullopt;
  ordered_ = Shape{next->placement, next->idle};
  if (next->pod_index && *next->pod_index != pod_.pod_index) {
    ProcessGroup::Print(absl::StrCat(kLauncherName, ": this pod holds pod index ", *next->pod_index,
                                     " (ranks ", *next->pod_index * pod_.processes_per_pod, "-",
                                     (*next->pod_index + 1) * pod_.processes_per_pod - 1,
                                     ") from restart attempt ", next->attempt, " on"));
    pod_.pod_index = *next->pod_index;
  }
  return next->attempt;
}

std::optional<int32_t> AttemptLoop::AwaitOrder(int32_t least, const std::string& waiting) {
  ProcessGroup::Hooks idle;
  idle.on_signal = [&](int) { signalled_ = true; };
  bool said = false;
  while (!signalled_) {
    if (!group_.WaitIdle(fd_, idle, said ? absl::InfiniteDuration() : absl::Milliseconds(200))) {
      if (!said && !signalled_ && !waiting.empty()) ProcessGroup::Print(waiting);
      said = true;
      continue;
    }
    std::vector<std::string> lines;
    const bool open = from_sidecar_.Read(&lines);
    if (std::optional<int32_t> next = NextOrder(lines, least)) return next;
    if (open) continue;
    if (!options_.spare || !Reconnect()) return std::nullopt;
  }
  return std::nullopt;
}

bool AttemptLoop::Reconnect() {
  if (fd_ >= 0) close(fd_);
  fd_ = options_.reconnect ? options_.reconnect() : -1;
  from_sidecar_ = LineReader(fd_);
  sidecar_gone_ = fd_ < 0;
  if (fd_ < 0) return false;
  ProcessGroup::Print(
      absl::StrCat(kLauncherName, ": the sidecar's launch socket closed; reconnected"));
  return true;
}

std::optional<int32_t> AttemptLoop::OrderedMeanwhile() {
  pollfd p{fd_, POLLIN, 0};
  if (sidecar_gone_ || poll(&p, 1, 0) != 1) return std::nullopt;
  std::vector<std::string> lines;
  sidecar_gone_ = !from_sidecar_.Read(&lines);
  return NextOrder(lines, attempt_ + 1);
}

env::ProcessPlacement AttemptLoop::placement() const {
  env::ProcessPlacement p = pod_;
  if (const std::optional<launch::Placement>& place = shape_.placement) {
    p.pod_index = place->position;
    p.num_pods = place->pods;
    p.replica_groups = place->replica_groups;
    p.desired_replica_groups = place->desired_replica_groups;
  }
  return p;
}

AttemptOutcome AttemptLoop::RunOne() {
  const env::ProcessPlacement p = placement();
  if (shape_.placement) {
    ProcessGroup::Print(absl::StrCat(kLauncherName, ": restart attempt ", attempt_, " runs ",
                                     p.world_size(), " processes in ", p.num_pods, " pods (",
                                     p.replica_groups, " of ", p.desired_replica_groups,
                                     " replica groups); this pod's are ranks ", p.rank(), "-",
                                     p.rank() + p.processes_per_pod - 1));
  }
  return RunPodProcesses(group_, options_.run, p, attempt_, [this] { return OrderedMeanwhile(); });
}

bool AttemptLoop::ReportEnd(const AttemptOutcome& out) {
  // Its last line, as the container's termination message would end: which process, and how.
  const std::string summary =
      absl::StrCat(kLauncherName, ": restart attempt ", attempt_, " ended with ", out.cause);
  const launch::AttemptEnded ended{
      attempt_, out.exit_code, absl::ToUnixMillis(absl::Now()), out.reason,
      out.message.empty() ? summary : absl::StrCat(out.message, "\n", summary)};
  const std::string line = launch::FormatEnded(ended);
  if (send(fd_, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size()))
    return false;  // The sidecar is gone: so is the pod's way to restart in place.
  ProcessGroup::Print(absl::StrCat(summary, "; waiting for the next"));
  return true;
}

void AttemptLoop::CleanShm() {
  if (options_.shm_dir.empty()) return;
  std::error_code ec;
  for (const std::filesystem::directory_entry& e :
       std::filesystem::directory_iterator(options_.shm_dir, ec)) {
    if (shm_before_.contains(e.path().filename().string())) continue;
    std::error_code rm;
    std::filesystem::remove_all(e.path(), rm);
  }
}

}  // namespace cohort
