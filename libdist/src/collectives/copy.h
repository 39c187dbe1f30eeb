#pragma once

#include <cstddef>

namespace dist::internal {

// memcpy for the host backend's bulk copies (user buffers <-> shared-memory slots). On x86 a
// copy whose destination sits 1 to 31 bytes after its source modulo 4 KiB runs ~15x slower with
// glibc's memcpy (every load 4K-aliases the store just before it: measured 2.8 GB/s instead of
// 45 GB/s for 128 KiB). The slots' alignment relative to a program's buffers is arbitrary, so
// this copies 256-byte blocks, all loads before all stores, which avoids it (45 GB/s at every
// offset). Falls back to memcpy without AVX2. Non-overlapping buffers only.
void CopyBytes(void* dst, const void* src, size_t bytes);

}  // namespace dist::internal
