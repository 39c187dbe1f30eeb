#include "launcher/cpu_binding.h"

#include <sched.h>

#include "absl/strings/str_cat.h"
#include "common/env.h"

namespace cohort {

absl::StatusOr<CpuBind> ParseCpuBind(const std::string& value) {
  if (value == "none") return CpuBind::kNone;
  if (value == "cores") return CpuBind::kCores;
  return absl::InvalidArgumentError(absl::StrCat(
      env::kCpuBind, "='", value,
      "' is not one of none, cores (cores: each local process on its own CPUs; none: the "
      "kernel places them)"));
}

absl::StatusOr<CpuBind> CpuBindFromEnvironment(CpuBind fallback) {
  std::optional<std::string> v = env::Get(env::kCpuBind);
  return v ? ParseCpuBind(*v) : fallback;
}

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

std::vector<int> CpuShare(const std::vector<int>& allowed, int index, int count) {
  const int n = static_cast<int>(allowed.size());
  if (n == 0 || count <= 0 || index < 0) return {};
  if (count >= n) return {allowed[index % n]};
  // Near-equal contiguous blocks, the first n % count ones one larger.
  const int base = n / count, extra = n % count;
  const int begin = index * base + std::min(index, extra);
  const int size = base + (index < extra ? 1 : 0);
  return std::vector<int>(allowed.begin() + begin, allowed.begin() + begin + size);
}

std::string DescribeCpus(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j > i ? absl::StrCat(cpus[i], "-", cpus[j]) : absl::StrCat(cpus[i]);
    i = j + 1;
  }
  return out;
}

}  // namespace cohort
