// The int8 dot-product roofline probe: chains of vpdpbusd. Compiled with -mavx512vnni (the
// *_avx512vnni.cc rule, CMakeLists.txt), so it runs only where GetCpuFeatures().avx512_vnni
// (MeasureInt8DotPeak).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "cli/fma_peak.h"

namespace mlaserve::cli {

// Twelve vpdpbusd chains one step on: a_j += ones (unsigned bytes) x pairs (signed bytes),
// written in assembly on twelve named accumulators: written with the intrinsic over an array, GCC
// copied every accumulator between registers and stored it to the stack each round (a loop-carried
// vpdpbusd sum), and the probe read half the rate the int8 kernels reach.
#define MLASERVE_DPBUSD_12(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, ones, pairs)                   \
  asm("vpdpbusd %13, %12, %0\n\tvpdpbusd %13, %12, %1\n\tvpdpbusd %13, %12, %2\n\t"                     \
      "vpdpbusd %13, %12, %3\n\tvpdpbusd %13, %12, %4\n\tvpdpbusd %13, %12, %5\n\t"                     \
      "vpdpbusd %13, %12, %6\n\tvpdpbusd %13, %12, %7\n\tvpdpbusd %13, %12, %8\n\t"                     \
      "vpdpbusd %13, %12, %9\n\tvpdpbusd %13, %12, %10\n\tvpdpbusd %13, %12, %11"                         \
      : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), \
        "+v"(a10), "+v"(a11)                                                                                 \
      : "v"(ones), "v"(pairs))

// acc += 1 * s + 1 * (-s) + 1 * s + 1 * (-s) per lane: each instruction adds exactly 0, so every
// chain keeps its seed 1 (no overflow). s (1 .. 127) comes from *sink so that the compiler cannot
// fold the products.
double Int8DotChains(int64_t iterations, float* sink) {
  static_assert(kInt8Chains == 24, "two MLASERVE_DPBUSD_12 a round");
  const int32_t s = 1 + int32_t(std::fabs(*sink) * 126.0f) % 127;
  const uint32_t byte = uint32_t(s) & 0xFF, minus = uint32_t(-s) & 0xFF;
  const __m512i pairs = _mm512_set1_epi32(int32_t(byte | minus << 8 | byte << 16 | minus << 24));
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i seed = _mm512_set1_epi32(1);
  __m512i a0 = seed, a1 = seed, a2 = seed, a3 = seed, a4 = seed, a5 = seed, a6 = seed, a7 = seed, a8 = seed,
          a9 = seed, a10 = seed, a11 = seed;
  __m512i b0 = seed, b1 = seed, b2 = seed, b3 = seed, b4 = seed, b5 = seed, b6 = seed, b7 = seed, b8 = seed,
          b9 = seed, b10 = seed, b11 = seed;
  for (int64_t i = 0; i < iterations; ++i) {
    MLASERVE_DPBUSD_12(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, ones, pairs);
    MLASERVE_DPBUSD_12(b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, ones, pairs);
  }
  __m512i sum = _mm512_setzero_si512();
  for (__m512i v : {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11}) {
    sum = _mm512_add_epi32(sum, v);
  }
  *sink = float(_mm512_reduce_add_epi32(sum));
  // 16 int32 lanes x 4 byte products each x 2 operations per multiply-add = 128 per instruction.
  return 128.0 * kInt8Chains * double(iterations);
}
#undef MLASERVE_DPBUSD_12

}  // namespace mlaserve::cli
