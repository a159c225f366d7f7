// AVX-512 KV row decoder (16 fp32 lanes). Compiled with -mavx512f/bw/vl/dq.
#include <immintrin.h>

#define MLASERVE_SIMD_NS avx512
#include "kvcache/kv_codec.h"
#include "kvcache/kv_codec_simd_impl.h"

namespace mlaserve {
namespace {

struct Avx512Codec {
  static constexpr int kLanes = 16;
  using Reg = __m512;
  static Reg Broadcast(float a) { return _mm512_set1_ps(a); }
  static Reg Mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static void Store(float* p, Reg v) { _mm512_storeu_ps(p, v); }

  // The scalar tables' NaN: quiet, payload 0, the sign of `value` (whose sign bit is the code's).
  static Reg SignedQuietNan(Reg value) {
    return _mm512_or_ps(_mm512_and_ps(value, _mm512_set1_ps(-0.0f)),
                        _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
  }

  static Reg LoadBf16(const uint8_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  // vcvtph2ps is exact for every finite and infinite fp16; NaN lanes are rebuilt as the scalar
  // decoder builds them (sign | payload << 13 | exponent all ones), since vcvtph2ps would quiet
  // a signaling NaN.
  static Reg LoadF16(const uint8_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m512i bits = _mm512_cvtepu16_epi32(h);
    const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fff));
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7c00));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(0x8000)), 16);
    const __m512i nan_bits =
        _mm512_or_si512(_mm512_or_si512(sign, _mm512_slli_epi32(magnitude, 13)), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_mov_ps(_mm512_cvtph_ps(h), nan, _mm512_castsi512_ps(nan_bits));
  }
  // Sign-extending each code to 16 bits and shifting left by 7 lays S EEEE MMM out as fp16 with
  // value / 256 (bit 14 copies the sign: cleared by the mask); exact, and * 256 is exact too.
  static Reg LoadE4M3(const uint8_t* p) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m256i h = _mm256_cvtepi8_epi16(codes);
    const __m256i f16 = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16(int16_t(0xBFFF)));
    const Reg value = _mm512_mul_ps(_mm512_cvtph_ps(f16), _mm512_set1_ps(256.0f));
    const __mmask16 nan = _mm_cmpeq_epi8_mask(_mm_and_si128(codes, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f));
    return _mm512_mask_mov_ps(value, nan, SignedQuietNan(value));
  }
  // An E5M2 code is the top byte of the fp16 of the same value; its NaN codes (magnitude above
  // 0x7C) read as the tables' quiet NaN.
  static Reg LoadE5M2(const uint8_t* p) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const Reg value = _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(codes), 8));
    const __mmask16 nan = _mm_cmpgt_epi8_mask(_mm_and_si128(codes, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7c));
    return _mm512_mask_mov_ps(value, nan, SignedQuietNan(value));
  }
  // Lane 2j: the low nibble of byte j, lane 2j + 1: its high nibble; vpermps reads only the low 4
  // bits of each index, so the nibbles need no masking.
  static Reg LoadE2M1(const uint8_t* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i nibbles = _mm_unpacklo_epi8(b, _mm_srli_epi16(b, 4));
    return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(nibbles), _mm512_loadu_ps(kE2M1ToF32.data()));
  }
};

}  // namespace

const KvCodec* Avx512KvCodec() {
  static const KvCodec kCodec{KernelIsa::kAvx512, "avx512", avx512::DequantizeRows<Avx512Codec>};
  return &kCodec;
}

}  // namespace mlaserve
