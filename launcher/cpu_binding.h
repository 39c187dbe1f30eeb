#pragma once

// Where a launcher binds the processes it starts on one machine or in one pod: local process l
// of K gets the l-th of K near-equal contiguous shares of the CPUs the launcher may use (its
// affinity mask: the pod's cpuset on Kubernetes), as MPI launchers bind ranks to cores and
// torchrun to NUMA nodes. A rank that keeps its CPU keeps its caches, and two ranks that wait
// for each other never queue on one CPU. With more processes than CPUs, process l gets CPU
// l mod CPUs. COHORT_CPU_BIND=none (cohort-run --cpu-bind none) leaves placement to the kernel.

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cohort {

enum class CpuBind {
  kNone,   // No binding: the kernel places the processes.
  kCores,  // Each local process on its own share of the CPUs.
};

// What the launchers do when neither COHORT_CPU_BIND nor a flag says.
inline constexpr CpuBind kDefaultCpuBind = CpuBind::kCores;

// "none" or "cores"; InvalidArgument naming COHORT_CPU_BIND and the accepted values otherwise.
absl::StatusOr<CpuBind> ParseCpuBind(const std::string& value);
// COHORT_CPU_BIND, or `fallback` when it is unset.
absl::StatusOr<CpuBind> CpuBindFromEnvironment(CpuBind fallback);

// The CPUs this process may run on, ascending.
std::vector<int> AllowedCpus();
// Local process `index`'s CPUs out of `allowed`, for `count` local processes.
std::vector<int> CpuShare(const std::vector<int>& allowed, int index, int count);
// "2-3" / "0,2,5": for messages.
std::string DescribeCpus(const std::vector<int>& cpus);

}  // namespace cohort
