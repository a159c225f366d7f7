// AVX2 + F16C KV row decoder (8 fp32 lanes). Compiled with -mavx2 -mfma -mf16c. The decoding
// tricks are those of kv_codec_avx512.cc, which explains them.
#include <immintrin.h>

#include <cstring>

#define MLASERVE_SIMD_NS avx2
#include "kvcache/kv_codec.h"
#include "kvcache/kv_codec_simd_impl.h"

namespace mlaserve {
namespace {

struct Avx2Codec {
  static constexpr int kLanes = 8;
  using Reg = __m256;
  static Reg Broadcast(float a) { return _mm256_set1_ps(a); }
  static Reg Mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static void Store(float* p, Reg v) { _mm256_storeu_ps(p, v); }

  static Reg SignedQuietNan(Reg value) {
    return _mm256_or_ps(_mm256_and_ps(value, _mm256_set1_ps(-0.0f)),
                        _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
  }
  // byte_mask: 8 bytes of 0x00 / 0xFF; lanes whose byte is 0xFF take SignedQuietNan(value).
  static Reg WithNans(Reg value, __m128i byte_mask) {
    return _mm256_blendv_ps(value, SignedQuietNan(value), _mm256_castsi256_ps(_mm256_cvtepi8_epi32(byte_mask)));
  }

  static Reg LoadBf16(const uint8_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static Reg LoadF16(const uint8_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m256i bits = _mm256_cvtepu16_epi32(h);
    const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fff));
    const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7c00));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x8000)), 16);
    const __m256i nan_bits =
        _mm256_or_si256(_mm256_or_si256(sign, _mm256_slli_epi32(magnitude, 13)), _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_ps(_mm256_cvtph_ps(h), _mm256_castsi256_ps(nan_bits), _mm256_castsi256_ps(nan));
  }
  static Reg LoadE4M3(const uint8_t* p) {
    const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i h = _mm_cvtepi8_epi16(codes);
    const __m128i f16 = _mm_and_si128(_mm_slli_epi16(h, 7), _mm_set1_epi16(int16_t(0xBFFF)));
    const Reg value = _mm256_mul_ps(_mm256_cvtph_ps(f16), _mm256_set1_ps(256.0f));
    return WithNans(value, _mm_cmpeq_epi8(_mm_and_si128(codes, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f)));
  }
  static Reg LoadE5M2(const uint8_t* p) {
    const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const Reg value = _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(codes), 8));
    return WithNans(value, _mm_cmpgt_epi8(_mm_and_si128(codes, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7c)));
  }
  // vpermps reads the low 3 bits of each index: the magnitude; bit 3, the sign, moves to bit 31
  // (the bits above it, the other nibble, shift out).
  static Reg LoadE2M1(const uint8_t* p) {
    int32_t word;
    std::memcpy(&word, p, sizeof(word));
    const __m128i b = _mm_cvtsi32_si128(word);
    const __m256i nibbles = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(b, _mm_srli_epi16(b, 4)));
    const Reg magnitude = _mm256_permutevar8x32_ps(_mm256_loadu_ps(kE2M1ToF32.data()), nibbles);
    const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(nibbles, 28), _mm256_set1_epi32(int32_t(0x80000000u)));
    return _mm256_xor_ps(magnitude, _mm256_castsi256_ps(sign));
  }
};

}  // namespace

const KvCodec* Avx2KvCodec() {
  static const KvCodec kCodec{KernelIsa::kAvx2, "avx2", avx2::DequantizeRows<Avx2Codec>};
  return &kCodec;
}

}  // namespace mlaserve
