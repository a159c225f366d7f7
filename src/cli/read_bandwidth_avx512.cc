// The read-bandwidth probe's 512-bit loop (compiled with -mavx512f; run only where the CPU has it).
#include <immintrin.h>

#include "cli/read_bandwidth.h"

namespace mlaserve::cli {

uint64_t ReadStreamsAvx512(const std::byte* p, size_t len, int streams, size_t stride, size_t ahead_bytes) {
  __m512i acc[8];
  for (__m512i& a : acc) a = _mm512_setzero_si512();
  for (size_t i = 0; i < len; i += 64) {
    for (int s = 0; s < streams; ++s) {
      const std::byte* line = p + size_t(s) * stride + i;
      if (ahead_bytes != 0) _mm_prefetch(reinterpret_cast<const char*>(line + ahead_bytes), _MM_HINT_T0);
      acc[s & 7] = _mm512_add_epi64(acc[s & 7], _mm512_load_si512(line));
    }
  }
  __m512i sum = acc[0];
  for (int j = 1; j < 8; ++j) sum = _mm512_add_epi64(sum, acc[j]);
  return uint64_t(_mm512_reduce_add_epi64(sum));
}

}  // namespace mlaserve::cli
