#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "kube/kube_client.h"

namespace cohort::kube {

// Keeps a handler informed of every object of one kind, like client-go's reflector: list, then
// watch from the list's resourceVersion with bookmarks; a stream the server ends is resumed from
// the last version seen; 410 Gone lists again, and the relist reports what changed meanwhile
// (objects that vanished as DELETED); other errors back off (capped) and retry. It keeps only
// names and versions, never whole objects, so memory stays small with thousands of pods.
// "namespace/name" of an object ("/" and empty parts for one without them); never throws.
std::string ObjectKey(const nlohmann::json& object);

class Informer {
 public:
  // `type` is ADDED, MODIFIED or DELETED. Called from the informer's thread, in order.
  using Handler = std::function<void(const std::string& type, const nlohmann::json& object)>;

  Informer(KubeClient* client, Resource resource, std::string ns, std::string label_selector,
           Handler handler, absl::Duration watch_timeout = absl::Minutes(5));
  ~Informer();  // Stop().

  void Start();
  // Ends the loop; a watch in progress ends at its next event or at the client's cancellation.
  void Stop();
  // Blocks until the first list was delivered or `timeout` passed; false on timeout.
  bool WaitForSync(absl::Duration timeout);

  // One list-and-watch cycle, for tests: lists if needed, then watches once. Returns the
  // watch's status.
  absl::Status RunOnce();
  int64_t lists() const { return lists_; }

 private:
  absl::Status Relist();
  void Loop();

  KubeClient* const client_;
  const Resource resource_;
  const std::string ns_;
  const std::string label_selector_;
  const Handler handler_;
  const absl::Duration watch_timeout_;

  std::string resource_version_;  // Of the last list or event; "" means list next.
  // "namespace/name" -> resourceVersion of every object known.
  absl::flat_hash_map<std::string, std::string> known_;
  std::atomic<int64_t> lists_{0};
  absl::Notification stop_;
  std::thread thread_;
  absl::Mutex mu_;
  bool synced_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort::kube
