#include "kube/informer.h"

#include "absl/strings/str_cat.h"
#include "common/backoff.h"
#include "common/log.h"
#include "kube/json_fields.h"

namespace cohort::kube {

using json = nlohmann::json;

std::string ObjectKey(const json& object) {
  const json& meta = Member(object, "metadata");
  return absl::StrCat(StringMember(meta, "namespace"), "/", StringMember(meta, "name"));
}

Informer::Informer(KubeClient* client, Resource resource, std::string ns,
                   std::string label_selector, Handler handler, absl::Duration watch_timeout)
    : client_(client),
      resource_(std::move(resource)),
      ns_(std::move(ns)),
      label_selector_(std::move(label_selector)),
      handler_(std::move(handler)),
      watch_timeout_(watch_timeout) {}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Informer::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

bool Informer::WaitForSync(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&synced_), timeout);
}

absl::Status Informer::Relist() {
  absl::StatusOr<json> list = client_->List(resource_, ns_, label_selector_);
  if (!list.ok()) return list.status();
  ++lists_;
  absl::flat_hash_map<std::string, std::string> seen;
  for (const json& item : ArrayMember(*list, "items")) {
    std::string key = ObjectKey(item);
    std::string version = StringMember(Member(item, "metadata"), "resourceVersion");
    auto it = known_.find(key);
    if (it == known_.end()) {
      handler_("ADDED", item);
    } else if (it->second != version) {
      handler_("MODIFIED", item);
    }
    seen[key] = version;
  }
  for (const auto& [key, version] : known_) {
    if (seen.contains(key)) continue;
    size_t slash = key.find('/');
    json gone = {{"metadata",
                  {{"namespace", key.substr(0, slash)},
                   {"name", key.substr(slash + 1)},
                   {"resourceVersion", version}}}};
    handler_("DELETED", gone);  // Only its name is known: it vanished while we were away.
  }
  known_ = std::move(seen);
  resource_version_ = StringMember(Member(*list, "metadata"), "resourceVersion");
  absl::MutexLock lock(&mu_);
  synced_ = true;
  return absl::OkStatus();
}

absl::Status Informer::RunOnce() {
  if (resource_version_.empty()) {
    if (absl::Status s = Relist(); !s.ok()) return s;
  }
  WatchOptions options;
  options.label_selector = label_selector_;
  options.resource_version = resource_version_;
  options.timeout = watch_timeout_;
  absl::Status s = client_->Watch(resource_, ns_, options, [this](const json& event) {
    if (stop_.HasBeenNotified()) return false;
    std::string type = StringMember(event, "type");
    const json& object = Member(event, "object");
    std::string version = StringMember(Member(object, "metadata"), "resourceVersion");
    if (!version.empty()) resource_version_ = version;
    if (type == "BOOKMARK") return true;
    std::string key = ObjectKey(object);
    if (type == "DELETED") {
      known_.erase(key);
    } else {
      known_[key] = version;
    }
    handler_(type, object);
    return true;
  });
  if (IsGone(s)) {
    LogInfo("watch of ", resource_.plural, ": ", s.message(), "; listing again");
    resource_version_.clear();
  }
  return s;
}

void Informer::Loop() {
  Backoff backoff(absl::Milliseconds(200), absl::Seconds(30));
  while (!stop_.HasBeenNotified()) {
    absl::Status s = RunOnce();
    if (stop_.HasBeenNotified() || absl::IsCancelled(s)) return;
    if (s.ok() || IsGone(s)) {
      backoff = Backoff(absl::Milliseconds(200), absl::Seconds(30));
      continue;
    }
    absl::Duration wait = backoff.Next();
    LogWarning("watch of ", resource_.plural, " failed: ", s.message(), "; retrying in ",
               absl::FormatDuration(wait));
    stop_.WaitForNotificationWithTimeout(wait);
  }
}

}  // namespace cohort::kube
