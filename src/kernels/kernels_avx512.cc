// AVX-512 kernel table (16 fp32 lanes). Compiled with -mavx512f/bw/vl/dq. BF16 weights are
// widened to fp32 in registers (a shift), so results match the fp32 reference path; the
// AVX512-BF16 dot-product instructions would round activations to bf16 and are not used.
#include <immintrin.h>

#include <algorithm>

#define MLASERVE_SIMD_NS avx512
#include "kernels/simd_kernels_impl.h"

namespace mlaserve {
namespace {

struct Avx512 {
  static constexpr int kLanes = 16;
  static constexpr int kMaxTokens = 3;  // tokens x rows x 4 accumulators stay in registers
  static constexpr int kPanelTokens = 12;  // x 2 output vectors in registers
  static constexpr int kRowBlock = 2;
  using Reg = __m512;
  static Reg Zero() { return _mm512_setzero_ps(); }
  static Reg Broadcast(float a) { return _mm512_set1_ps(a); }
  static Reg LoadF32(const float* p) { return _mm512_loadu_ps(p); }
  static void StoreF32(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static Reg Add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg LoadFp8(const std::byte* p) {
    const __m256i h = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i bits = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7f)), 7),
                                         _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x80)), 8));
    return _mm512_cvtph_ps(bits);
  }
  static Reg LoadInt4(const std::byte* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i bytes = _mm_unpacklo_epi8(_mm_and_si128(b, mask), _mm_and_si128(_mm_srli_epi16(b, 4), mask));
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(bytes), _mm512_set1_epi32(8)));
  }
  static Reg Fma(Reg a, Reg b, Reg acc) { return _mm512_fmadd_ps(a, b, acc); }
  template <DType D>
  static Reg LoadW(const std::byte* p) {
    if constexpr (D == DType::kF32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
    } else {
      __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      if constexpr (D == DType::kBF16) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      } else {
        return _mm512_cvtph_ps(h);
      }
    }
  }
  static float Sum(Reg v) { return _mm512_reduce_add_ps(v); }
};

}  // namespace

const KernelSet* Avx512Kernels() {
  static const KernelSet kSet{KernelIsa::kAvx512, "avx512", avx512::MatMulRows<Avx512>, avx512::MatMulPanels<Avx512>,
                              avx512::AxpyRow<Avx512>, avx512::DotF32<Avx512>,
                              avx512::AxpyF32<Avx512>};
  return &kSet;
}

}  // namespace mlaserve
