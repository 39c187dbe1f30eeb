#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/informer.h"
#include "kube/kube_client.h"

namespace cohort::local {

// The pod addresses a node hands out: <prefix><third>.<2..254> for third in [first, last]
// (127.0.x.y for processes, the podman network's 10.n.x.y for containers).
struct PodSubnet {
  int first = 0;
  int last = 0;
  std::string prefix = "127.0.";
};

struct SchedulerOptions {
  // The nodes pods may be placed on, each with its own addresses (a node missing here is never
  // chosen). Distinct nodes must have disjoint subnets.
  std::map<std::string, PodSubnet> subnets;
  // The cluster's DNS names (<host>.<subdomain>.<ns>.svc, ...) of every placed pod, as a hosts
  // file the pods' network library reads.
  std::string hosts_file;
};

// The local control plane's scheduler, and its address manager standing in for a CNI's:
// - a pod without spec.nodeName goes to the Ready node (Ready=True, in `subnets`) running the
//   fewest unfinished pods, ties to the first name, so a job's pods spread over the nodes; it is
//   bound with one merge patch that also sets its address (annotation kPodAddressAnnotation),
//   drawn from the node's subnet, which the node's kubelet reports as status.podIP;
// - a cordoned node (spec.unschedulable: `kubectl cordon`) takes no new pod; its pods stay, and
//   once uncordoned it takes pods again (waiting ones first);
// - a node takes at most its Node's status.allocatable.pods (the kubelet's --max-pods) pods that
//   have not finished (Succeeded/Failed), terminating ones included, as Kubernetes counts them;
// - with no Ready node with room the pod stays Pending with PodScheduled=False (reason
//   Unschedulable, the message saying why per node, as "0/2 nodes are available: 2 Too many
//   pods."), and is placed once a node becomes Ready or uncordoned or a pod finishes or goes;
// - a pod with spec.schedulingGates stays Pending with PodScheduled=False, reason
//   SchedulingGated, and is considered once its last gate is removed;
// - the hosts file names every placed pod from the moment it is bound until its object is gone,
//   so its peers resolve it before its containers start, and a pod of a lost node stops
//   resolving when its object is force-deleted.
class Scheduler {
 public:
  static constexpr char kPodAddressAnnotation[] = "local.cohort.dev/pod-ip";

  Scheduler(kube::KubeClient* client, SchedulerOptions options);
  ~Scheduler();

  void Start();
  // Blocks until `count` nodes are Ready or `timeout` passed; false on timeout.
  bool WaitForReadyNodes(int count, absl::Duration timeout);

 private:
  struct Placed {
    std::string uid;
    std::string node;
    std::string address;
    bool running = true;   // Neither finished nor being deleted.
    bool occupies = true;  // Not finished: it takes one of its node's pods (allocatable.pods).
  };
  void OnPod(const std::string& type, const nlohmann::json& pod);
  void OnNode(const std::string& type, const nlohmann::json& node);
  // Binds every waiting pod it can.
  void ScheduleWaiting() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Places the pod on the node ChooseNode() picks; false when it has to wait.
  bool Bind(const std::string& key, const nlohmann::json& pod) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives the pod an address on `node`, names it, and writes both (and `node`) into the pod with
  // one merge patch; undone when the patch fails.
  absl::Status Place(const std::string& key, const nlohmann::json& pod, const std::string& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PodScheduled=False with `reason` and `message`, once per change of them.
  void MarkUnscheduled(const std::string& key, const nlohmann::json& pod, const std::string& reason,
                       const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The nodes with as many unfinished pods as their allocatable pods.
  std::set<std::string> FullNodes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why no node takes a pod now, as the real scheduler says it.
  std::string UnschedulableMessage() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string ChooseNode() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string AllocateAddress(const std::string& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Forget(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteHostsFile() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  kube::KubeClient* const client_;
  const SchedulerOptions options_;
  std::unique_ptr<kube::Informer> pods_;
  std::unique_ptr<kube::Informer> nodes_;
  absl::Mutex mu_;
  std::set<std::string> ready_nodes_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> cordoned_ ABSL_GUARDED_BY(mu_);  // spec.unschedulable.
  // By "namespace/name".
  std::map<std::string, Placed> placed_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, nlohmann::json> waiting_ ABSL_GUARDED_BY(mu_);
  // The PodScheduled=False reason and message last written, by pod key.
  std::map<std::string, std::string> marked_unscheduled_ ABSL_GUARDED_BY(mu_);
  // By node: its status.allocatable.pods; absent: no limit.
  std::map<std::string, int64_t> max_pods_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> used_addresses_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> next_address_ ABSL_GUARDED_BY(mu_);  // By node.
  // Address -> DNS names, for the hosts file.
  std::map<std::string, std::vector<std::string>> names_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::local
