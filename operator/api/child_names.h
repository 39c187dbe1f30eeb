#pragma once

// The names and labels of the objects a DistributedJob owns (children.h builds them): its Service,
// its token Secret, its pods (a rank's, a replacement's, a spare's) and its pod groups, and the job
// a pod of these names belongs to.

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "operator/api/distributed_job.h"

namespace cohort::op {

// Labels on every child; selectors use the first two.
inline constexpr char kJobNameLabel[] = "cohort.dev/job-name";
inline constexpr char kRankLabel[] = "cohort.dev/rank";
inline constexpr char kRestartAttemptLabel[] = "cohort.dev/restart-attempt";
// On a spare pod (SparePodName), its name; it stays when the spare takes a slot (then the pod also
// has the slot's kRankLabel), so the pod is known as one that began as a spare.
inline constexpr char kSpareLabel[] = "cohort.dev/spare";

std::string ServiceName(const DistributedJob& job);            // The job's name.
std::string SecretName(const DistributedJob& job);             // "<job>-token".
std::string PodName(const DistributedJob& job, int32_t rank);  // "<job>-<rank>".
// Restarting in place, the pod that replaces rank's alone in `restart_attempt`:
// "<job>-<rank>-r<restart_attempt>" (its hostname stays "<job>-<rank>").
std::string ReplacementPodName(const DistributedJob& job, int32_t rank, int32_t restart_attempt);
// The job a pod of these names belongs to ("train" of "train-2" and "train-2-r3"), for a pod known
// only by its name (a DELETED event from a relist); "" for a name neither makes.
std::string JobOfPodName(absl::string_view pod_name);
// The same for a spare's name ("train" of "train-spare4"); "" for another. No name is both (a
// rank's pod name ends in "-<digits>", a spare's in "-spare<digits>").
std::string JobOfSparePodName(absl::string_view pod_name);
// The `sequence`th spare pod the job created: "<job>-spare<sequence>" (status.sparesCreated
// counts them, so no name is used twice: the attempt hub never lets a pod it displaced back).
std::string SparePodName(const DistributedJob& job, int32_t sequence);
// The Kueue pod group of a restart attempt's pods: "<job>-<attempt>" (the job's name cut so that
// it is a label value), one per attempt, since Kueue admits a group once.
std::string PodGroupName(const DistributedJob& job, int32_t restart_attempt);

}  // namespace cohort::op
