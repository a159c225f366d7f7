// The bf16 dot-product roofline probe: chains of vdpbf16ps. Compiled with -mavx512bf16 (this file
// alone, CMakeLists.txt), so it runs only where GetCpuFeatures().avx512_bf16 (MeasureBf16DotPeak).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cli/fma_peak.h"
#include "kernels/kernels.h"

namespace mlaserve::cli {

// acc += s * 1 + (-s) * 1 per lane: each pair adds exactly 0 (bf16 products are exact in fp32), so
// every chain keeps its seed 1: no overflow, no denormals. The pairs' values come from *sink so
// the compiler cannot fold them.
double Bf16DotChains(int64_t iterations, float* sink) {
  uint32_t bits;
  std::memcpy(&bits, sink, sizeof bits);
  const uint32_t s = bits >> 16, minus_s = s | 0x8000u;  // bf16 by truncation: s exactly negated
  const __m512bh a = (__m512bh)_mm512_set1_epi32(int32_t(s | minus_s << 16));
  const __m512bh ones = (__m512bh)_mm512_set1_epi32(0x3F803F80);  // bf16 1.0 in both halves
  __m512 acc[kBf16Chains];
  for (int j = 0; j < kBf16Chains; ++j) acc[j] = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 32
    for (int j = 0; j < kBf16Chains; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, ones);
  }
  __m512 sum = _mm512_setzero_ps();
  for (int j = 0; j < kBf16Chains; ++j) sum = _mm512_add_ps(sum, acc[j]);
  *sink = _mm512_reduce_add_ps(sum);
  // 16 fp32 lanes x 2 bf16 pairs each x 2 FLOPs per multiply-add = 64 FLOPs per instruction.
  return 64.0 * kBf16Chains * double(iterations);
}

}  // namespace mlaserve::cli
