#pragma once

#include "absl/time/time.h"

namespace dist::internal {

// poll()'s timeout for `deadline`: milliseconds left, rounded up (0 once it passed; capped at an
// hour, since an infinite deadline must not overflow).
int MillisUntil(absl::Time deadline);

// Waits until `fd` is ready for `events` (POLLIN, POLLOUT). False at the deadline or on error.
bool WaitFd(int fd, short events, absl::Time deadline);

}  // namespace dist::internal
