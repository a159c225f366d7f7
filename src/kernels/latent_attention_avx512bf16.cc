// The bf16 tables' decode attention kernels (latent_attention.h): scores as bf16 x bf16 dot
// products with the heads in vector lanes, the weighted sum as fp32 FMAs over the rows widened as
// they are read. Compiled with -mavx512bf16: nothing here may run unless CpuSupportsBf16Dot().
//
// Scores: a packed query vector holds four dimensions of eight heads (latent_attention.h); one
// 8-byte broadcast of a row's quad multiplies two such vectors (sixteen heads) with two
// vdpbf16ps, so a block of kScoreRows rows keeps 2 x kScoreRows accumulators in registers while
// the query streams from L1 once per block. Each head's score is its two lanes' chains added.
//
// Weighted sum: per 32-value block of the latent and block of up to eight heads, 2 x 8
// accumulators (the block's even and odd values: a row's 32 bf16 widen with one shift and one
// mask, no shuffle) run over every row of the tile, each probability broadcast from memory.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/latent_attention.h"

namespace mlaserve::avx512bf16 {
namespace {

constexpr int kScoreRows = 12;  // x 2 accumulators + 2 query vectors + 1 broadcast: 27 registers
constexpr int kSumHeads = 8;    // x 2 accumulators

template <int kMax, class Fn>
inline void WithCount(int64_t n, Fn&& fn) {
  if constexpr (kMax > 0) {
    if (n == kMax) return fn(std::integral_constant<int, kMax>{});
    WithCount<kMax - 1>(n, fn);
  }
}

// Lanes of (even, odd) words: index vectors picking a pair's two lanes from two accumulators.
inline __m512i EvenLanes() { return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30); }
inline __m512i OddLanes() { return _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31); }
// Interleaving even and odd values back: (e0, o0, e1, o1, ...), low then high half.
inline __m512i LowInterleave() {
  return _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
}
inline __m512i HighInterleave() {
  return _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}

// R rows x 16 heads (group g's packed query qg, `quads` quads) into scores[r * hp].
template <int R>
inline void ScoreBlock(const uint32_t* qg, int64_t quads, const uint16_t* const* rows, float* scores, int64_t hp) {
  __m512 acc[R][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const std::byte* row[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) row[r] = reinterpret_cast<const std::byte*>(rows[r]);
  for (int64_t d = 0; d < quads; ++d) {
    const __m512bh q0 = (__m512bh)_mm512_loadu_si512(qg + d * 32);
    const __m512bh q1 = (__m512bh)_mm512_loadu_si512(qg + d * 32 + 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      int64_t quad;
      std::memcpy(&quad, row[r] + d * 8, 8);
      const __m512bh b = (__m512bh)_mm512_set1_epi64(quad);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], q0, b);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], q1, b);
    }
  }
  const __m512i even = EvenLanes(), odd = OddLanes();
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m512 s = _mm512_add_ps(_mm512_permutex2var_ps(acc[r][0], even, acc[r][1]),
                                   _mm512_permutex2var_ps(acc[r][0], odd, acc[r][1]));
    _mm512_storeu_ps(scores + r * hp, s);
  }
}

// H heads (h0...) x the 32 values [c0, c0 + 32) of o over n rows.
template <int H>
inline void SumBlock(const float* p, int64_t hp, int64_t h0, const float* corr, const uint16_t* const* rows,
                     int64_t n, int64_t c0, int64_t latent_dim, float* o) {
  const __m512i even = EvenLanes(), odd = OddLanes();
  __m512 acc_even[H], acc_odd[H];
#pragma GCC unroll 8
  for (int j = 0; j < H; ++j) {
    const float* oh = o + (h0 + j) * latent_dim + c0;
    const __m512 lo = _mm512_loadu_ps(oh), hi = _mm512_loadu_ps(oh + 16);
    const __m512 c = _mm512_set1_ps(corr[h0 + j]);
    acc_even[j] = _mm512_mul_ps(_mm512_permutex2var_ps(lo, even, hi), c);
    acc_odd[j] = _mm512_mul_ps(_mm512_permutex2var_ps(lo, odd, hi), c);
  }
  const __m512i high_half = _mm512_set1_epi32(int32_t(0xFFFF0000u));
  for (int64_t r = 0; r < n; ++r) {
    // Word 2i of the 32 values is value 2i: the low half of 32-bit lane i. Shifted up, it is
    // that value as fp32; the high half masked is value 2i + 1.
    const __m512i v = _mm512_loadu_si512(rows[r] + c0);
    const __m512 ev = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    const __m512 od = _mm512_castsi512_ps(_mm512_and_si512(v, high_half));
    const float* pr = p + r * hp + h0;
#pragma GCC unroll 8
    for (int j = 0; j < H; ++j) {
      const __m512 w = _mm512_set1_ps(pr[j]);
      acc_even[j] = _mm512_fmadd_ps(w, ev, acc_even[j]);
      acc_odd[j] = _mm512_fmadd_ps(w, od, acc_odd[j]);
    }
  }
  const __m512i low_interleave = LowInterleave(), high_interleave = HighInterleave();
#pragma GCC unroll 8
  for (int j = 0; j < H; ++j) {
    float* oh = o + (h0 + j) * latent_dim + c0;
    _mm512_storeu_ps(oh, _mm512_permutex2var_ps(acc_even[j], low_interleave, acc_odd[j]));
    _mm512_storeu_ps(oh + 16, _mm512_permutex2var_ps(acc_even[j], high_interleave, acc_odd[j]));
  }
}

}  // namespace

void LatentPackQuery(const float* q, int64_t heads, int64_t row_dim, uint32_t* q_pack) {
  const int64_t hp = LatentHeadsPadded(heads), quads = row_dim / 4;
  alignas(64) uint64_t words[1024];  // one head's quads: row_dim <= 4096
  for (int64_t h = 0; h < hp; ++h) {
    if (h < heads) {
      const float* qh = q + h * row_dim;
      // 32 values -> 16 pairs (8 quads) per conversion; the last block masked.
      for (int64_t i = 0; i < row_dim; i += 32) {
        const int64_t left = row_dim - i;
        const __mmask16 lo = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
        const __mmask16 hi = left >= 32 ? __mmask16(0xFFFF) : left <= 16 ? 0 : __mmask16((1u << (left - 16)) - 1);
        const __m512i pairs = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, qh + i + 16),
                                                           _mm512_maskz_loadu_ps(lo, qh + i));
        _mm512_store_si512(words + i / 4, pairs);
      }
    } else {
      std::memset(words, 0, size_t(quads) * 8);
    }
    // Quad d of head h: qword j of vector v of (group, d).
    const int64_t g = h / 16, v = (h % 16) / 8, j = h % 8;
    auto* dst = reinterpret_cast<uint64_t*>(q_pack) + (g * quads * 2 + v) * 8 + j;
    for (int64_t d = 0; d < quads; ++d) dst[d * 16] = words[d];
  }
}

void LatentScores(const uint32_t* q_pack, int64_t hp, const uint16_t* const* rows, int64_t n, int64_t row_dim,
                  float* scores) {
  const int64_t quads = row_dim / 4;
  for (int64_t g = 0; g < hp / 16; ++g) {
    const uint32_t* qg = q_pack + g * quads * 32;
    for (int64_t r = 0; r < n; r += kScoreRows) {
      WithCount<kScoreRows>(std::min<int64_t>(kScoreRows, n - r), [&](auto count) {
        ScoreBlock<decltype(count)::value>(qg, quads, rows + r, scores + r * hp + g * 16, hp);
      });
    }
  }
}

void LatentSum(const float* p, int64_t hp, int64_t heads, const float* corr, const uint16_t* const* rows, int64_t n,
               int64_t latent_dim, float* o, const RowPrefetch& next) {
  // The next rows' lines, an even share before each block.
  const int64_t lines_per_row = (next.bytes + 63) / 64, lines = next.count * lines_per_row;
  const int64_t blocks = latent_dim / 32 * ((heads + kSumHeads - 1) / kSumHeads);
  int64_t line = 0, block = 0;
  for (int64_t c0 = 0; c0 < latent_dim; c0 += 32) {
    for (int64_t h0 = 0; h0 < heads; h0 += kSumHeads) {
      for (const int64_t until = lines * ++block / blocks; line < until; ++line) {
        const auto* row = reinterpret_cast<const char*>(next.rows[line / lines_per_row]);
        _mm_prefetch(row + (line % lines_per_row) * 64, _MM_HINT_T1);
      }
      WithCount<kSumHeads>(std::min<int64_t>(kSumHeads, heads - h0), [&](auto count) {
        SumBlock<decltype(count)::value>(p, hp, h0, corr, rows, n, c0, latent_dim, o);
      });
    }
  }
}

}  // namespace mlaserve::avx512bf16
