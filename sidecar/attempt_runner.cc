#include "sidecar/attempt_runner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/env.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "coordination/attempts/attempt_layout_proto.h"

namespace cohort::sidecar {

namespace attemptspb = coordination::attemptspb;

absl::StatusOr<std::unique_ptr<AttemptRunner>> AttemptRunner::Start(
    const SidecarConfig& config, std::vector<SidecarMetrics*> metrics, Hooks hooks) {
  std::unique_ptr<AttemptRunner> runner(new AttemptRunner(config, std::move(hooks)));
  AttemptRunner& r = *runner;
  const int32_t first = config.settings.restart_attempt.value_or(0);
  const bool hub_here = config.spare.empty() && config.settings.process_id == 0;
  {
    absl::MutexLock lock(&r.mu_);
    r.attempt_ = first;
    r.released_ = hub_here;  // Rank 0's hub runs `first` from the start.
  }
  // Before the hub or its follower, whose orders it carries. A spare's cohort-launch waits there:
  // no attempt is ordered until the pod holds a slot.
  absl::StatusOr<std::unique_ptr<LaunchChannel>> launch = LaunchChannel::Serve(
      config.launch_socket, hub_here ? std::optional<int32_t>(first) : std::nullopt,
      [&r](const launch::AttemptEnded& ended) { r.ReportEnded(ended); });
  if (!launch.ok()) return launch.status();
  r.launch_ = *std::move(launch);
  // A spare that took this pod's slot: cohort-launch hears which pod it now is with every order.
  if (config.spare.empty() && env::Get(env::kSpare)) r.launch_->HoldPodIndex(config.pod_index());
  absl::StatusOr<std::string> address =
      coordination::AttemptControlAddress(config.settings.coordinator_address);
  if (!address.ok()) return address.status();
  r.hub_address_ = *address;
  absl::StatusOr<coordination::HangTimeout> hang_timeout =
      coordination::ParseHangTimeout(env::Get(env::kHangTimeout).value_or("auto"));
  if (!hang_timeout.ok()) return hang_timeout.status();
  // Before the hub and the follower, whose dump orders it takes; a spare has no ranks to watch.
  if (config.spare.empty() && !hang_timeout->off()) {
    r.StartProgressWatch(std::move(metrics));
  }
  if (hub_here) {
    if (absl::Status s = r.StartHub(*hang_timeout); !s.ok()) return s;
  } else {
    r.StartFollower();
  }
  return runner;
}

AttemptRunner::~AttemptRunner() {
  if (progress_)
    progress_->Stop();  // Its thread sends through the hub or the follower, which go first.
  follower_.reset();
  hub_.reset();
  launch_.reset();
}

void AttemptRunner::StartProgressWatch(std::vector<SidecarMetrics*> metrics) {
  ProgressWatch::Options options;
  options.agent_socket = config_.agent_socket;
  options.first_rank = config_.settings.process_id;
  options.processes_per_pod = config_.processes_per_pod;
  options.pod_index = config_.pod_index();
  options.metrics = std::move(metrics);
  options.ask_process = hooks_.ask_process;
  progress_ = std::make_unique<ProgressWatch>(std::move(options));
  absl::MutexLock lock(&mu_);
  progress_->SetAttempt(attempt_, config_.settings.process_id);
}

absl::Status AttemptRunner::StartHub(const coordination::HangTimeout& timeout) {
  absl::StatusOr<int> port = env::CoordinatorPort(config_.settings.coordinator_address);
  if (!port.ok()) return port.status();
  absl::StatusOr<std::unique_ptr<coordination::AttemptHubServer>> hub =
      coordination::AttemptHubServer::Start(
          absl::StrCat(config_.flags.coordinator_bind_address, ":",
                       *port + env::kAttemptControlPortOffset),
          config_.settings.restart_attempt.value_or(0), config_.settings.token);
  if (!hub.ok()) return hub.status();
  hub_ = *std::move(hub);
  coordination::AttemptHub& h = hub_->hub();
  h.set_before_start([this](const attemptspb::AttemptOrder& order) {
    hooks_.restart_coordinator(
        PlaceOf(order.attempt(), coordination::LayoutFromProto(order.layout())));
  });
  h.set_on_end(hooks_.on_end);
  h.set_on_drain([this](int32_t attempt, const std::string&) {
    if (hooks_.drain) hooks_.drain(attempt);
  });
  h.set_hang_detection(timeout, env::DumpsDir(config_.agent_socket),
                       [this](uint64_t dump_id, int32_t attempt) {
                         if (progress_) progress_->Dump(dump_id, attempt);
                       });
  h.FollowLocally([this](const attemptspb::AttemptOrder& order) { OnOrder(order); });
  if (progress_) {
    progress_->Start([this](const attemptspb::ReportHealthRequest& report) {
      hub_->hub().RecordHealth(report, absl::Now());
      hub_->hub().CheckHang(absl::Now());  // Rank 0 drives the detector, once a second.
    });
  }
  return absl::OkStatus();
}

void AttemptRunner::StartFollower() {
  auto on_order = [this](const attemptspb::AttemptOrder& order) { OnOrder(order); };
  const std::string& token = config_.settings.token;
  if (!config_.spare.empty()) {
    follower_ = coordination::AttemptFollower::Spare(hub_address_, token, config_.spare, on_order);
  } else if (std::optional<std::string> spare = env::Get(env::kSpare)) {
    // A spare that took this slot follows as the spare holding it (the hub lets no one else).
    follower_ = coordination::AttemptFollower::Spare(hub_address_, token, *spare, on_order,
                                                     config_.pod_index());
  } else {
    follower_ = std::make_unique<coordination::AttemptFollower>(
        hub_address_, token, config_.pod_index(), on_order, PodName());
  }
  if (progress_) {
    progress_->Start([this](const attemptspb::ReportHealthRequest& report) {
      // The next report follows in a second: a lost one is not worth a retry.
      if (absl::Status s = follower_->ReportHealth(report); !s.ok()) {
        LogDebug("could not tell the attempt hub how this pod's ranks progress: ", s.ToString());
      }
    });
  }
}

void AttemptRunner::OnOrder(const attemptspb::AttemptOrder& order) {
  if (!config_.spare.empty()) {
    absl::MutexLock lock(&mu_);
    following_ = true;
    if (order.has_pod_index() && !slot_) slot_ = SpareSlot{order.pod_index(), order.attempt()};
    return;
  }
  std::optional<AttemptLayout> layout = coordination::LayoutFromProto(order.layout());
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    if (!ordered_ || order.attempt() > *ordered_) {
      ordered_ = order.attempt();
      ordered_layout_ = layout;
    }
    release = !released_ && order.attempt() == attempt_;
    released_ |= release;
  }
  // The attempt this pod was made for, which the others run already (a pod that replaces one
  // alone); a later one goes through BeginAttempt.
  if (release) {
    const AttemptPlace place = PlaceOf(order.attempt(), layout);
    if (layout) hooks_.renew_agents(place);  // Placed elsewhere than its environment says.
    if (progress_)
      progress_->SetAttempt(place.attempt,
                            place.idle ? std::nullopt : std::optional<int32_t>(place.first_rank));
    launch_->Order(place.launch_order());
  }
  if (order.dump_id() != 0 && progress_) progress_->Dump(order.dump_id(), order.attempt());
}

AttemptPlace AttemptRunner::PlaceOf(int32_t attempt,
                                    const std::optional<AttemptLayout>& layout) const {
  AttemptPlace place;
  place.attempt = attempt;
  place.first_rank = config_.settings.process_id;
  place.num_processes = config_.settings.num_processes;
  if (!layout) return place;
  place.layout = layout;
  place.num_processes = layout->pods() * config_.processes_per_pod;
  if (std::optional<int32_t> position = layout->Position(config_.pod_index())) {
    place.first_rank = *position * config_.processes_per_pod;
    place.placement = launch::Placement{.position = *position,
                                        .pods = layout->pods(),
                                        .replica_groups = layout->replica_groups,
                                        .desired_replica_groups = layout->desired_replica_groups};
  } else {
    place.idle = true;
  }
  return place;
}

void AttemptRunner::BeginAttempt(const AttemptPlace& place) {
  hooks_.renew_agents(place);
  {
    absl::MutexLock lock(&mu_);
    attempt_ = place.attempt;
    released_ = true;
  }
  if (progress_) {
    progress_->SetAttempt(place.attempt,
                          place.idle ? std::nullopt : std::optional<int32_t>(place.first_rank));
  }
  launch_->Order(place.launch_order());
  if (place.idle) {
    LogInfo("restart attempt ", place.attempt, " runs without this pod (", place.layout->Describe(),
            "): cohort-launch told to wait for a later one");
  } else if (place.layout) {
    LogInfo("restart attempt ", place.attempt, ": ranks ", place.first_rank, "-",
            place.first_rank + config_.processes_per_pod - 1, " of ", place.num_processes, " (",
            place.layout->Describe(), "); agents ready, cohort-launch told");
  } else {
    LogInfo("restart attempt ", place.attempt, ": agents ready, cohort-launch told");
  }
}

void AttemptRunner::ReportEnded(const launch::AttemptEnded& ended) {
  attemptspb::AttemptEnd end;
  end.set_pod_index(config_.pod_index());
  end.set_attempt(ended.attempt);
  end.set_exit_code(ended.exit_code);
  end.set_reason(ended.reason);
  end.set_message(ended.message);
  end.set_finished_unix_ms(ended.finished_unix_ms);
  LogInfo("restart attempt ", ended.attempt, " of this pod ended: exit code ", ended.exit_code,
          " (", ended.reason, ")");
  if (progress_) progress_->AttemptEnded(ended.attempt);
  if (hub_) {
    hub_->hub().ReportEnd(end);
  } else if (absl::Status s = follower_->ReportEnd(end); !s.ok()) {
    LogWarning("could not report the end of restart attempt ", ended.attempt,
               " to the attempt hub: ", s.ToString());
  }
}

void AttemptRunner::Run() {
  // The first attempt waits for the hub's order (OnOrder): a hub that says nothing within
  // kFirstOrderPatience (unreachable: the job cannot restart in place anyway) does not hold the
  // processes back; one that runs an earlier attempt does (this pod replaces one alone).
  {
    absl::MutexLock lock(&mu_);
    auto heard = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return released_ || ordered_.has_value() || stop_ || preempting_;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&heard), kFirstOrderPatience)) {
      LogWarning("the attempt hub did not answer within ",
                 absl::FormatDuration(kFirstOrderPatience), ": starting restart attempt ", attempt_,
                 " without its order");
      released_ = true;
      launch_->Order(launch::AttemptOrder{.attempt = attempt_});
    }
  }
  // Attempt after attempt until a signal ends it.
  while (true) {
    int32_t next = 0;
    std::optional<AttemptLayout> layout;
    {
      absl::MutexLock lock(&mu_);
      auto ordered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || preempting_ || (ordered_ && *ordered_ > attempt_);
      };
      mu_.Await(absl::Condition(&ordered));
      if (stop_ || preempting_) break;
      next = *ordered_;
      layout = ordered_layout_;
    }
    BeginAttempt(PlaceOf(next, layout));
  }
  // Preempted (the pod evicted or deleted) before its processes of the attempt started: nobody
  // else can say so, and the other pods' processes would wait for its ranks to join.
  launch::AttemptEnded ended;
  {
    absl::MutexLock lock(&mu_);
    if (!preempting_ || released_) return;
    ended.attempt = attempt_;
  }
  ended.exit_code = kPreemptedExitCode;
  ended.finished_unix_ms = absl::ToUnixMillis(absl::Now());
  ended.reason = "Preempted";
  ended.message = absl::StrCat("the pod was preempted before its processes of restart attempt ",
                               ended.attempt, " started");
  ReportEnded(ended);
}

std::optional<SpareSlot> AttemptRunner::AwaitSlot() {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return slot_.has_value() || stop_ || preempting_;
  };
  mu_.Await(absl::Condition(&done));
  return stop_ || preempting_ ? std::nullopt : slot_;
}

void AttemptRunner::Stop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
}

void AttemptRunner::Preempting() {
  absl::MutexLock lock(&mu_);
  preempting_ = true;
}

bool AttemptRunner::following() const {
  absl::MutexLock lock(&mu_);
  return following_;
}

}  // namespace cohort::sidecar
