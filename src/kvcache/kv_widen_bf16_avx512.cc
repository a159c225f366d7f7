// WidenKvRowsBf16 with AVX-512BW (kv_widen_bf16.h): 32 e4m3 codes at a time in integer lanes.
// A code S EEEE MMM with E > 0 is 2^(E - 7) * (1 + M / 8): in bf16, sign S, exponent field
// E + 120, mantissa M << 4, i.e. (code & 0x7F) << 4 plus 120 << 7 under the sign. E = 0 is
// M * 2^-9 (zero for M = 0): eight bf16 values looked up with vpermw. 0x7F is NaN. A ds_mla
// block's power-of-two scale 2^k adds k to the exponent field of every nonzero value.
#include <immintrin.h>

#include <bit>

#include "kvcache/kv_widen_bf16.h"
#include "kvcache/kv_widen_bf16_rows.h"

namespace mlaserve::avx512 {
namespace {

// bf16 of M * 2^-9, M < 8 (the rest of the 32-entry table is never indexed).
inline __m512i SubnormalTable() {
  return _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
                          0x3C60, 0x3C40, 0x3C20, 0x3C00, 0x3BC0, 0x3B80, 0x3B00, 0x0000);
}

// 32 codes widened (their 16-bit lanes in x), each nonzero value's exponent raised by the
// shifted exponent_add (kScaled).
template <bool kScaled>
inline __m512i WidenVector(__m512i x, __m512i add) {
  const __m512i magnitude_mask = _mm512_set1_epi16(0x7F);
  const __m512i mag = _mm512_and_si512(x, magnitude_mask);
  __m512i v = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), _mm512_set1_epi16(120 << 7));
  v = _mm512_mask_mov_epi16(v, _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(8)),
                            _mm512_permutexvar_epi16(mag, SubnormalTable()));
  if constexpr (kScaled) v = _mm512_mask_add_epi16(v, _mm512_test_epi16_mask(mag, mag), v, add);
  v = _mm512_mask_mov_epi16(v, _mm512_cmpeq_epi16_mask(mag, magnitude_mask), _mm512_set1_epi16(0x7FC0));
  return _mm512_ternarylogic_epi32(v, _mm512_slli_epi16(x, 8), _mm512_set1_epi16(int16_t(0x8000)), 0xF8);  // v | (x<<8 & sign)
}

// `count` codes (whole vectors, then the last one masked), each nonzero value's exponent raised
// by exponent_add (kScaled).
template <bool kScaled>
void E4M3ToBf16(const uint8_t* codes, int count, int exponent_add, uint16_t* out) {
  const __m512i add = _mm512_set1_epi16(int16_t(exponent_add << 7));
  int i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i)));
    _mm512_storeu_si512(out + i, WidenVector<kScaled>(x, add));
  }
  if (i < count) {
    const __mmask32 m = __mmask32((1u << (count - i)) - 1);
    const __m512i x = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, codes + i));
    _mm512_mask_storeu_epi16(out + i, m, WidenVector<kScaled>(x, add));
  }
}

// A scale 2^k adds k to every nonzero value's exponent field (its exponent field minus the bias).
struct Avx512Parts {
  static void E4M3(const uint8_t* codes, int count, float scale, uint16_t* out) {
    if (scale == 1.0f) return E4M3ToBf16<false>(codes, count, 0, out);
    E4M3ToBf16<true>(codes, count, int(std::bit_cast<uint32_t>(scale) >> 23) - 127, out);
  }
};

}  // namespace

void WidenKvRowsBf16(KvFormat format, const std::byte* src, int num_rows, size_t row_stride_bytes, int latent_dim,
                     int rope_dim, uint16_t* out) {
  kv_widen::WidenRowsWith<Avx512Parts>(format, src, num_rows, row_stride_bytes, latent_dim, rope_dim, out);
}

}  // namespace mlaserve::avx512
