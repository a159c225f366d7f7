// AVX2 + FMA + F16C kernel table (8 fp32 lanes). Compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#define MLASERVE_SIMD_NS avx2
#include "kernels/simd_kernels_impl.h"
#include "kernels/gemm_f32_impl.h"
#include "kernels/simd_elementwise_impl.h"

namespace mlaserve {
namespace {

struct Avx2 {
  static constexpr int kLanes = 8;
  static constexpr int kMaxTokens = 2;  // tokens x rows x 4 accumulators stay in registers
  static constexpr int kPanelTokens = 4;  // x 2 output vectors in registers
  static constexpr int kGemmTokens = 6;   // prefill tiles from widened weights: x 2 vectors in registers
  static constexpr int kRowBlock = 1;
  using Reg = __m256;
  static Reg Zero() { return _mm256_setzero_ps(); }
  static Reg Broadcast(float a) { return _mm256_set1_ps(a); }
  static Reg LoadF32(const float* p) { return _mm256_loadu_ps(p); }
  static void StoreF32(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static Reg Add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  // See kernels_avx512.cc: sign-extend, shift into fp16 position, clear the copied sign bit.
  static Reg LoadFp8(const std::byte* p) {
    const __m128i h = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(h, 7), _mm_set1_epi16(int16_t(0xBFFF))));
  }
  // Panel columns c and c + 1: kLanes codes at p and at p + 16.
  static void LoadFp8Columns(const std::byte* p, Reg& first, Reg& second) {
    first = LoadFp8(p);
    second = LoadFp8(p + 16);
  }
  static Reg LoadInt4(const std::byte* p) {
    int32_t word;
    std::memcpy(&word, p, 4);
    const __m128i b = _mm_cvtsi32_si128(word);
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i bytes = _mm_unpacklo_epi8(_mm_and_si128(b, mask), _mm_and_si128(_mm_srli_epi16(b, 4), mask));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(bytes), _mm256_set1_epi32(8)));
  }
  static Reg LoadInt8(const std::byte* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  // Nibbles 0 .. 15 of 4 bytes: lane 2j byte j's low nibble, 2j+1 its high one.
  static Reg LoadUint4(const std::byte* p) {
    uint32_t word;
    std::memcpy(&word, p, 4);
    const __m256i b = _mm256_set1_epi32(int32_t(word));
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(b, shifts), _mm256_set1_epi32(0x0F)));
  }
  // The low (high_nibbles: high) nibbles of bytes 0 and 1 (high_bytes: 2 and 3) of the 8 words at p.
  static void LoadUint4Pair(const std::byte* p, bool high_bytes, bool high_nibbles, Reg& even, Reg& odd) {
    __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if (high_nibbles) q = _mm256_srli_epi32(q, 4);
    if (high_bytes) q = _mm256_srli_epi32(q, 16);
    const __m256i mask = _mm256_set1_epi32(0x0F);
    even = _mm256_cvtepi32_ps(_mm256_and_si256(q, mask));
    odd = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(q, 8), mask));
  }
  static Reg LoadUint8(const std::byte* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  // Bytes 0 and 1 (2 and 3 when high) of the 8 words at p: shifted to the top of the word, then
  // back down, arithmetically (signed: int8 codes) or logically (unsigned: uint8-min codes).
  template <bool kSigned>
  static void LoadBytePair(const std::byte* p, bool high, Reg& even, Reg& odd) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i e = high ? _mm256_slli_epi32(q, 8) : _mm256_slli_epi32(q, 24);
    const __m256i o = high ? q : _mm256_slli_epi32(q, 16);
    if constexpr (kSigned) {
      even = _mm256_cvtepi32_ps(_mm256_srai_epi32(e, 24));
      odd = _mm256_cvtepi32_ps(_mm256_srai_epi32(o, 24));
    } else {
      even = _mm256_cvtepi32_ps(_mm256_srli_epi32(e, 24));
      odd = _mm256_cvtepi32_ps(_mm256_srli_epi32(o, 24));
    }
  }
  // Panel lanes' bytes at p (8): low nibbles are one column, high nibbles the next, each - 8.
  static void LoadInt4Columns(const std::byte* p, Reg& low, Reg& high) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i eight = _mm256_set1_epi32(8);
    low = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x0f)), eight));
    high = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b, 4), eight));
  }
  // For the element-wise kernels (simd_elementwise_impl.h).
  static Reg Div(Reg a, Reg b) { return _mm256_div_ps(a, b); }
  static Reg Fnma(Reg a, Reg b, Reg c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a * b
  static Reg Min(Reg a, Reg b) { return _mm256_min_ps(a, b); }
  static Reg Max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static Reg Round(Reg a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127], as a float: n + 127 in the exponent field.
  static Reg Pow2(Reg n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  static Reg Fma(Reg a, Reg b, Reg acc) { return _mm256_fmadd_ps(a, b, acc); }
  template <DType D>
  static Reg LoadW(const std::byte* p) {
    if constexpr (D == DType::kF32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    } else {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      if constexpr (D == DType::kBF16) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
      } else {
        return _mm256_cvtph_ps(h);
      }
    }
  }
  static float Sum(Reg v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace

const KernelSet* Avx2Kernels() {
  static const KernelSet kSet{KernelIsa::kAvx2, "avx2", avx2::MatMulRows<Avx2>, avx2::MatMulPanels<Avx2>,
                              avx2::AxpyRow<Avx2>, avx2::DotF32<Avx2>, avx2::AxpyF32<Avx2>,
                              avx2::FmaChains<Avx2>,
                              avx2::PackActivations<Avx2>, avx2::MatMulPanelsPacked<Avx2>,
                              avx2::RmsNorm<Avx2>, avx2::AddRmsNorm<Avx2>, avx2::SiluMul<Avx2>, avx2::GemmF32<Avx2>,
                              avx2::ExpSum<Avx2>, avx2::ScaleMax<Avx2>, avx2::SoftmaxColumns<Avx2>,
                              avx2::ScaleAddF32<Avx2>};
  return &kSet;
}

}  // namespace mlaserve
