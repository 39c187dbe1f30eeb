#pragma once

// The Kubernetes objects a DistributedJob owns, built from its spec: the headless Service that
// gives every rank a DNS name before it is ready, the Secret holding the job's coordination
// token, and one Pod per rank with the cohort-sidecar injected and the environment contract
// (common/env.h names the variables; docs/operator.md lists them). Pure functions: no API calls.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"
#include "operator/api/child_names.h"
#include "operator/api/distributed_job.h"

namespace cohort::op {

// Where the sidecar and the trainer meet (a shared emptyDir) and where the token is mounted.
inline constexpr char kAgentDir[] = "/run/cohort";
inline constexpr char kAgentSocket[] = "/run/cohort/agent.sock";
// Where the init container cohort-launch-install puts cohort-launch when the pod runs several
// processes.
inline constexpr char kLauncherPath[] = "/run/cohort/bin/cohort-launch";
inline constexpr char kTokenDir[] = "/var/run/secrets/cohort";
inline constexpr char kTokenKey[] = "token";
inline constexpr int kSidecarMetricsPort = 9400;

// Whether `object`'s controller is the job with uid `job_uid` (an empty uid: any job). An object
// without a controller reference that carries the job-name label counts as the job's (made by
// hand).
bool OwnedByJob(const nlohmann::json& object, const std::string& job_uid);

// Headless (clusterIP None), publishNotReadyAddresses, selecting the job's pods.
nlohmann::json BuildService(const DistributedJob& job);
// An Opaque Secret with the token under "token".
nlohmann::json BuildTokenSecret(const DistributedJob& job, const std::string& token);
// spec.scheduling.podGroup: the apiVersion of its provider's PodGroup (scheduler-plugins'
// scheduling.x-k8s.io/v1alpha1, Volcano's scheduling.volcano.sh/v1beta1, Kubernetes'
// scheduling.k8s.io/v1beta1), and the group of a restart attempt (named PodGroupName(), owned by
// the job, labelled with the attempt): minMember (default every pod; Kubernetes' gang minCount),
// and coscheduling's scheduleTimeoutSeconds.
const char* PodGroupApiVersion(PodGroupProvider provider);
nlohmann::json BuildPodGroup(const DistributedJob& job, int32_t restart_attempt);
// How a pod names its group: coscheduling's label, Volcano's annotation, Kubernetes' pod field
// spec.schedulingGroup.podGroupName.
inline constexpr char kCoschedulingPodGroupLabel[] = "scheduling.x-k8s.io/pod-group";
inline constexpr char kVolcanoGroupNameAnnotation[] = "scheduling.k8s.io/group-name";

// The pod of `rank` (the pod index: its processes are ranks rank x processesPerPod onwards) in
// the gang's `restart_attempt`: the template's pod with hostname/subdomain
// set, restartPolicy Never, the sidecar as a native sidecar (an init container with restartPolicy
// Always), the shared socket directory and token volumes, and the COHORT_* and JAX_* environment
// in every container. With several processes per pod started by Cohort, the init container
// cohort-launch-install and the trainer's command run through cohort-launch; with several
// processes or GPUs, a memory-backed /dev/shm.
nlohmann::json BuildPod(const DistributedJob& job, int32_t rank, int32_t restart_attempt);
// The same, named `name` (ReplacementPodName).
nlohmann::json BuildPod(const DistributedJob& job, int32_t rank, int32_t restart_attempt,
                        const std::string& name);
// Hot spares: spare pod number `sequence` (SparePodName), built like a rank's pod but holding no
// rank: the kSpareLabel label instead of kRankLabel, its own name as hostname, COHORT_SPARE in
// every container and no rank variables (cohort-launch sets them when the spare takes a slot).
nlohmann::json BuildSparePod(const DistributedJob& job, int32_t sequence, int32_t restart_attempt);

}  // namespace cohort::op
