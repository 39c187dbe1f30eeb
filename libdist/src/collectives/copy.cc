#include "libdist/src/collectives/copy.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dist::internal {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx2"))) void CopyBlocksAvx2(char* d, const char* s, size_t n) {
  size_t i = 0;
  for (; i + 256 <= n; i += 256) {
    const __m256i r0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i r1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    const __m256i r2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    const __m256i r3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    const __m256i r4 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 128));
    const __m256i r5 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 160));
    const __m256i r6 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 192));
    const __m256i r7 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 224));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), r0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 32), r1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 64), r2);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 96), r3);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 128), r4);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 160), r5);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 192), r6);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 224), r7);
  }
  std::memcpy(d + i, s + i, n - i);
}

const bool kHaveAvx2 = __builtin_cpu_supports("avx2");
#endif

}  // namespace

void CopyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
#if defined(__x86_64__)
  // Only the bad relative alignment needs the blocked copy; memcpy is as fast elsewhere.
  const size_t delta = (reinterpret_cast<size_t>(dst) - reinterpret_cast<size_t>(src)) & 4095;
  if (kHaveAvx2 && delta > 0 && delta < 64 && bytes >= 1024) {
    CopyBlocksAvx2(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace dist::internal
