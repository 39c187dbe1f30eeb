#include "operator/runtime/hub_attempt_watcher.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "coordination/attempts/attempt_layout_proto.h"

namespace cohort::op {

HubAttemptWatcher::HubAttemptWatcher(std::function<void(const std::string& key)> on_change)
    : on_change_(std::move(on_change)) {}

HubAttemptWatcher::~HubAttemptWatcher() {
  std::map<std::string, std::shared_ptr<Job>> jobs;
  {
    absl::MutexLock lock(&mu_);
    jobs.swap(jobs_);
  }
  jobs.clear();  // Outside the lock: a stream's thread may be waiting for it.
}

void HubAttemptWatcher::Watch(const std::string& key, const std::string& address,
                              const std::string& token) {
  std::shared_ptr<Job> replaced;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(key);
    if (it != jobs_.end() && it->second->address == address) return;
    auto job = std::make_shared<Job>();
    job->address = address;
    if (it != jobs_.end()) {
      job->since = it->second->since;
      replaced = std::move(it->second);
    }
    jobs_[key] = job;
  }
  replaced.reset();  // Its stream's thread is joined here, outside the lock.
  auto stream = std::make_unique<coordination::AttemptObserver>(
      address, token,
      [this, key, address](const coordination::attemptspb::AttemptState& s) {
        OnState(key, address, s);
      },
      [this, key, address](const absl::Status&) { OnBroken(key, address); });
  std::unique_ptr<coordination::AttemptObserver> unused;  // Destroyed (joined) outside the lock.
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(key);
  if (it != jobs_.end() && it->second->address == address && !it->second->stream) {
    it->second->stream = std::move(stream);
  } else {
    unused = std::move(stream);  // Forgotten or replaced meanwhile.
  }
}

void HubAttemptWatcher::Close(const std::string& key) {
  std::unique_ptr<coordination::AttemptObserver> closed;  // Joined outside the lock.
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end() || it->second->stream == nullptr) return;
  closed = std::move(it->second->stream);
  it->second->address = "";  // A later Watch opens a stream again.
}

void HubAttemptWatcher::Forget(const std::string& key) {
  std::shared_ptr<Job> gone;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(key);
    if (it == jobs_.end()) return;
    gone = std::move(it->second);
    jobs_.erase(it);
  }
}

AttemptView AttemptViewOf(const coordination::attemptspb::AttemptState& state,
                          const std::optional<AttemptView>& before) {
  AttemptView view;
  view.hub_incarnation = state.hub_incarnation();
  view.attempt = state.attempt();
  view.layout = coordination::LayoutFromProto(state.layout());
  view.connected = true;
  view.following.insert(state.following().begin(), state.following().end());
  view.followed = view.following;
  view.spares.insert(state.spares().begin(), state.spares().end());
  // Who followed this hub before still did (a hub started anew knows none of them).
  if (before && before->hub_incarnation == view.hub_incarnation)
    view.followed.insert(before->followed.begin(), before->followed.end());
  for (const auto& e : state.ends()) {
    AttemptView::End& end = view.ends[e.pod_index()];
    end.exit_code = e.exit_code();
    end.reason = e.reason();
    end.message = e.message();
    end.finished_at = absl::FromUnixMillis(e.finished_unix_ms());
  }
  if (state.has_hang()) {
    const auto& h = state.hang();
    AttemptView::Hang hang;
    hang.id = h.id();
    hang.attempt = h.attempt();
    hang.detected_at = absl::FromUnixMillis(h.detected_unix_ms());
    for (const auto& r : h.outliers())
      hang.outliers.push_back({r.rank(), r.pod_index(), r.local(), r.where()});
    for (const auto& g : h.groups())
      hang.groups.push_back({{g.ranks().begin(), g.ranks().end()}, g.where()});
    hang.dumps_complete = h.dumps_complete();
    hang.pods_dumped = h.pods_dumped();
    hang.pods_total = h.pods_total();
    hang.dumps_dir = h.dumps_dir();
    view.hang = std::move(hang);
  }
  return view;
}

void HubAttemptWatcher::OnState(const std::string& key, const std::string& address,
                                const coordination::attemptspb::AttemptState& state) {
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(key);
    if (it == jobs_.end() || it->second->address != address) return;
    it->second->view = AttemptViewOf(state, it->second->view);
  }
  on_change_(key);
}

void HubAttemptWatcher::OnBroken(const std::string& key, const std::string& address) {
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(key);
    if (it == jobs_.end() || it->second->address != address || !it->second->view) return;
    it->second->view->connected = false;
  }
  on_change_(key);
}

std::optional<AttemptView> HubAttemptWatcher::View(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return std::nullopt;
  if (it->second->view) return it->second->view;
  AttemptView waiting;  // Watched, nothing heard yet.
  waiting.heard = false;
  waiting.watching_since = it->second->since;
  return waiting;
}

std::shared_ptr<HubAttemptWatcher::Job> HubAttemptWatcher::StreamOf(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(key);
  return it != jobs_.end() && it->second->stream != nullptr ? it->second : nullptr;
}

absl::Status HubAttemptWatcher::Start(
    const std::string& key, int32_t attempt,
    const std::vector<std::pair<int32_t, std::string>>& assignments,
    const std::optional<AttemptLayout>& layout) {
  std::shared_ptr<Job> job = StreamOf(key);  // Keeps the stream alive through the call.
  if (job == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no stream to job ", key, "'s attempt hub yet"));
  }
  std::vector<coordination::attemptspb::SpareAssignment> to_spares;
  for (const auto& [pod_index, spare] : assignments) {
    coordination::attemptspb::SpareAssignment& a = to_spares.emplace_back();
    a.set_pod_index(pod_index);
    a.set_spare(spare);
  }
  return job->stream->Start(attempt, to_spares, layout);
}

absl::Status HubAttemptWatcher::Drain(const std::string& key, int32_t attempt,
                                      const std::string& reason) {
  std::shared_ptr<Job> job = StreamOf(key);
  if (job == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no stream to job ", key, "'s attempt hub yet"));
  }
  return job->stream->Drain(attempt, reason);
}

}  // namespace cohort::op
