#pragma once

#include <map>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"

namespace cohort::local {

// Each kubelet renews the Lease kube-node-lease/<node> every quarter of the grace period.
inline constexpr char kNodeLeaseNamespace[] = "kube-node-lease";
// The taint key a node that stopped renewing gets (with effects NoSchedule and NoExecute).
inline constexpr char kUnreachableTaint[] = "node.kubernetes.io/unreachable";

// Which nodes stopped renewing their Lease, measured on the observer's clock, as Kubernetes'
// node lifecycle controller measures it: what counts is when a renewal was seen, not the time
// a node wrote into it.
class NodeLeaseMonitor {
 public:
  explicit NodeLeaseMonitor(absl::Duration grace) : grace_(grace) {}
  // The node's Lease as read at `now`; `renew_time` is "" when it has none. A value other than
  // the last one seen is a renewal. The first observation starts the node's clock.
  void Observe(const std::string& node, const std::string& renew_time, absl::Time now);
  void Forget(const std::string& node) { seen_.erase(node); }
  // True once `grace` passed without a renewal seen (an unknown node is not silent).
  bool Silent(const std::string& node, absl::Time now) const;

 private:
  struct Seen {
    std::string renew_time;
    absl::Time at;
  };
  const absl::Duration grace_;
  std::map<std::string, Seen> seen_;
};

// The local control plane's node lifecycle controller. A node whose kubelet stopped renewing its
// Lease for `grace` (the kubelet process died: the machine is lost) gets Ready=Unknown (reason
// NodeStatusUnknown) and the unreachable taints, and its pods Ready=False (reason
// NodeNotReady); nothing deletes them. When the Lease is renewed again and the kubelet has
// reported Ready, the taints go. The scheduler places no pod on a node that is not Ready.
class NodeLifecycleController {
 public:
  NodeLifecycleController(kube::KubeClient* client, absl::Duration grace);
  ~NodeLifecycleController();  // Stops.

  void Start();

 private:
  void Loop();
  void Check();
  void MarkLost(const std::string& node);
  void RemoveTaints(const nlohmann::json& node);

  kube::KubeClient* const client_;
  const absl::Duration grace_;
  NodeLeaseMonitor monitor_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace cohort::local
