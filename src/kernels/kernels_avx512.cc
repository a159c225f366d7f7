// AVX-512 kernel table (16 fp32 lanes). Compiled with -mavx512f/bw/vl/dq. BF16 weights are
// widened to fp32 in registers (a shift), so results match the fp32 reference path; the
// AVX512-BF16 dot-product instructions would round activations to bf16 and are not used.
#include <immintrin.h>

#include <algorithm>

#define MLASERVE_SIMD_NS avx512
#include "kernels/simd_kernels_impl.h"
#include "kernels/gemm_f32_impl.h"
#include "kernels/simd_elementwise_impl.h"

namespace mlaserve {
namespace {

struct Avx512 {
  static constexpr int kLanes = 16;
  static constexpr int kMaxTokens = 3;  // tokens x rows x 4 accumulators stay in registers
  static constexpr int kPanelTokens = 12;  // x 2 output vectors in registers
  static constexpr int kGemmTokens = 12;   // prefill tiles from widened weights: x 2 vectors in registers
  static constexpr int kRowBlock = 2;
  using Reg = __m512;
  static Reg Zero() { return _mm512_setzero_ps(); }
  static Reg Broadcast(float a) { return _mm512_set1_ps(a); }
  static Reg LoadF32(const float* p) { return _mm512_loadu_ps(p); }
  static void StoreF32(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static Reg Add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  // Sign-extending each code to 16 bits and shifting left by 7 lays S EEEE MMM out as fp16
  // (exponent field 0EEEE, value / 256), except that bit 14 copies the sign: cleared by the mask.
  static Reg LoadFp8(const std::byte* p) {
    const __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16(int16_t(0xBFFF))));
  }
  // Panel columns c and c + 1 (32 adjacent codes, p and p + 16): one widening to fp16 for both.
  static void LoadFp8Columns(const std::byte* p, Reg& first, Reg& second) {
    const __m512i h = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512i f16 = _mm512_and_si512(_mm512_slli_epi16(h, 7), _mm512_set1_epi16(int16_t(0xBFFF)));
    first = _mm512_cvtph_ps(_mm512_castsi512_si256(f16));
    second = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(f16, 1));
  }
  // vpermps reads only the low 4 bits of each index, so the nibbles need no masking: the table
  // maps nibble n to n - 8.
  static Reg LoadInt4(const std::byte* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i bytes = _mm_unpacklo_epi8(b, _mm_srli_epi16(b, 4));  // lane 2j: byte j, 2j+1: byte j >> 4
    const __m512 table = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(bytes), table);
  }
  static Reg LoadInt8(const std::byte* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  // vpermps reads only the index's low 4 bits: the identity table gives each nibble 0 .. 15.
  static Reg LoadUint4(const std::byte* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i bytes = _mm_unpacklo_epi8(b, _mm_srli_epi16(b, 4));  // lane 2j: byte j, 2j+1: byte j >> 4
    const __m512 table = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(bytes), table);
  }
  // The low (high_nibbles: high) nibbles of bytes 0 and 1 (high_bytes: 2 and 3) of the 16 words at p.
  static void LoadUint4Pair(const std::byte* p, bool high_bytes, bool high_nibbles, Reg& even, Reg& odd) {
    __m512i q = _mm512_loadu_si512(p);
    if (high_nibbles) q = _mm512_srli_epi32(q, 4);
    if (high_bytes) q = _mm512_srli_epi32(q, 16);
    const __m512i mask = _mm512_set1_epi32(0x0F);
    even = _mm512_cvtepi32_ps(_mm512_and_si512(q, mask));
    odd = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(q, 8), mask));
  }
  static Reg LoadUint8(const std::byte* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  // Bytes 0 and 1 (2 and 3 when high) of the 16 words at p: shifted to the top of the word, then
  // back down, arithmetically (signed: int8 codes) or logically (unsigned: uint8-min codes).
  template <bool kSigned>
  static void LoadBytePair(const std::byte* p, bool high, Reg& even, Reg& odd) {
    const __m512i q = _mm512_loadu_si512(p);
    const __m512i e = high ? _mm512_slli_epi32(q, 8) : _mm512_slli_epi32(q, 24);
    const __m512i o = high ? q : _mm512_slli_epi32(q, 16);
    if constexpr (kSigned) {
      even = _mm512_cvtepi32_ps(_mm512_srai_epi32(e, 24));
      odd = _mm512_cvtepi32_ps(_mm512_srai_epi32(o, 24));
    } else {
      even = _mm512_cvtepi32_ps(_mm512_srli_epi32(e, 24));
      odd = _mm512_cvtepi32_ps(_mm512_srli_epi32(o, 24));
    }
  }
  // Panel lanes' bytes at p (16): low nibbles are one column, high nibbles the next, each - 8.
  static void LoadInt4Columns(const std::byte* p, Reg& low, Reg& high) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512 table = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    low = _mm512_permutexvar_ps(b, table);  // vpermps reads only the index's low 4 bits
    high = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), table);
  }
  // For the element-wise kernels (simd_elementwise_impl.h).
  static Reg Div(Reg a, Reg b) { return _mm512_div_ps(a, b); }
  static Reg Fnma(Reg a, Reg b, Reg c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a * b
  static Reg Min(Reg a, Reg b) { return _mm512_min_ps(a, b); }
  static Reg Max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static Reg Round(Reg a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127], as a float: n + 127 in the exponent field.
  static Reg Pow2(Reg n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
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
                              avx512::AxpyF32<Avx512>, avx512::FmaChains<Avx512>,
                              avx512::PackActivations<Avx512>, avx512::MatMulPanelsPacked<Avx512>,
                              avx512::RmsNorm<Avx512>, avx512::AddRmsNorm<Avx512>, avx512::SiluMul<Avx512>, avx512::GemmF32<Avx512>,
                              avx512::ExpSum<Avx512>, avx512::ScaleMax<Avx512>, avx512::SoftmaxColumns<Avx512>,
                              avx512::ScaleAddF32<Avx512>};
  return &kSet;
}

}  // namespace mlaserve
