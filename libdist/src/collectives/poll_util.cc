#include "libdist/src/collectives/poll_util.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "absl/time/clock.h"

namespace dist::internal {

int MillisUntil(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000 * 3600));
}

bool WaitFd(int fd, short events, absl::Time deadline) {
  pollfd p{fd, events, 0};
  while (true) {
    const int rc = poll(&p, 1, MillisUntil(deadline));
    if (rc > 0) return true;
    if (rc == 0 || errno != EINTR) return false;
  }
}

}  // namespace dist::internal
