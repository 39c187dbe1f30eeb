#pragma once

// What the local kubelet tells libcohort-pod-network.so (pod_network.cc), which it preloads into
// every process a pod runs without containers: the names of the variables it sets.

namespace cohort::local {

// The pod's own address (127.0.x.y): a wildcard bind is made on it, and the pod's hostname
// resolves to it.
inline constexpr char kPodIpVariable[] = "COHORT_LOCAL_POD_IP";
// The hosts file the kubelet keeps (pod and Service names), for cluster DNS.
inline constexpr char kHostsFileVariable[] = "COHORT_LOCAL_HOSTS_FILE";
// "<mountPath>=<directory>;...": where each of the pod's volume mounts really lies.
inline constexpr char kMountsVariable[] = "COHORT_LOCAL_MOUNTS";

}  // namespace cohort::local
