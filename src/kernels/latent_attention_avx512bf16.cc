// The bf16 tables' decode attention kernels (latent_attention.h): scores and the weighted sum as
// bf16 x bf16 dot products with the heads in vector lanes, accumulated in fp32. Compiled with
// -mavx512bf16: nothing here may run unless CpuSupportsBf16Dot().
//
// Scores: a packed query vector holds four dimensions of eight heads (latent_attention.h); one
// 8-byte broadcast of a row's quad multiplies two such vectors (sixteen heads) with two
// vdpbf16ps, so a block of kScoreRows rows keeps 2 x kScoreRows accumulators in registers while
// the query streams from L1 once per block. Each head's score is its two lanes' chains added.
//
// Weighted sum: the probabilities rounded to bf16 in pairs of rows; per 32-value block of the
// latent and block of up to eight heads, 2 x 8 accumulators run over the tile's row pairs, the
// two rows' values interleaved into pairs by vpunpck{l,h}wd (which permutes the columns, undone
// when the accumulators are stored), each head's probability pair broadcast: one vdpbf16ps adds
// two rows' products to 16 values.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/check.h"
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

using LinePacer = RowLinePacer<PrefetchIntoL2>;

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
// One line of `pacer` each step over the quads.
template <int R>
inline void ScoreBlock(const uint32_t* qg, int64_t quads, const uint16_t* const* rows, float* scores, int64_t hp,
                       LinePacer& pacer) {
  __m512 acc[R][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const std::byte* row[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) row[r] = reinterpret_cast<const std::byte*>(rows[r]);
  for (int64_t d = 0; d < quads; ++d) {
    pacer.Step();
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

// The 32 values [c0, c0 + 32) of two rows interleaved by vpunpck{l,h}wd, as (row a, row b) pairs:
// the low vector holds columns c0 + {0-3, 8-11, 16-19, 24-27}, the high one c0 + {4-7, 12-15,
// 20-23, 28-31}. Index vectors moving o's 32 values into that order and back:
inline __m512i ToLowColumns() { return _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27); }
inline __m512i ToHighColumns() { return _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31); }
inline __m512i FromColumnsFirst() { return _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23); }
inline __m512i FromColumnsSecond() {
  return _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
}

// H heads (h0...) x the 32 values [c0, c0 + 32) of o over `pairs` row pairs: pp[i * hp + h] is
// head h's probabilities of rows 2i and 2i + 1 in bf16 (low half: row 2i); row_a[i], row_b[i]
// the pair's rows.
template <int H>
inline void SumBlock(const uint32_t* pp, int64_t hp, int64_t h0, const float* corr, const uint16_t* const* row_a,
                     const uint16_t* const* row_b, int64_t pairs, int64_t c0, int64_t latent_dim, float* o) {
  __m512 acc_lo[H], acc_hi[H];
  const __m512i to_lo = ToLowColumns(), to_hi = ToHighColumns();
  if (corr == nullptr) {  // a partial's first tile: o's old values are not read
#pragma GCC unroll 8
    for (int j = 0; j < H; ++j) acc_lo[j] = acc_hi[j] = _mm512_setzero_ps();
  } else {
#pragma GCC unroll 8
    for (int j = 0; j < H; ++j) {
      const float* oh = o + (h0 + j) * latent_dim + c0;
      const __m512 first = _mm512_loadu_ps(oh), second = _mm512_loadu_ps(oh + 16);
      const __m512 c = _mm512_set1_ps(corr[h0 + j]);
      acc_lo[j] = _mm512_mul_ps(_mm512_permutex2var_ps(first, to_lo, second), c);
      acc_hi[j] = _mm512_mul_ps(_mm512_permutex2var_ps(first, to_hi, second), c);
    }
  }
  for (int64_t i = 0; i < pairs; ++i) {
    const __m512i a = _mm512_loadu_si512(row_a[i] + c0), b = _mm512_loadu_si512(row_b[i] + c0);
    const __m512bh lo = (__m512bh)_mm512_unpacklo_epi16(a, b), hi = (__m512bh)_mm512_unpackhi_epi16(a, b);
    const uint32_t* pi = pp + i * hp + h0;
#pragma GCC unroll 8
    for (int j = 0; j < H; ++j) {
      const __m512bh w = (__m512bh)_mm512_set1_epi32(int32_t(pi[j]));
      acc_lo[j] = _mm512_dpbf16_ps(acc_lo[j], lo, w);
      acc_hi[j] = _mm512_dpbf16_ps(acc_hi[j], hi, w);
    }
  }
  const __m512i first_idx = FromColumnsFirst(), second_idx = FromColumnsSecond();
#pragma GCC unroll 8
  for (int j = 0; j < H; ++j) {
    float* oh = o + (h0 + j) * latent_dim + c0;
    _mm512_storeu_ps(oh, _mm512_permutex2var_ps(acc_lo[j], first_idx, acc_hi[j]));
    _mm512_storeu_ps(oh + 16, _mm512_permutex2var_ps(acc_lo[j], second_idx, acc_hi[j]));
  }
}

}  // namespace

void LatentPackQuery(const float* q, int64_t heads, int64_t row_dim, uint32_t* q_pack) {
  const int64_t hp = LatentHeadsPadded(heads), quads = row_dim / 4;
  MLA_CHECK(row_dim <= kLatentMaxRowDim);
  alignas(64) uint64_t words[kLatentMaxRowDim / 4];  // one head's quads
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
    // (The words may live in float storage, as the model's scratch: stored as may_alias words.)
    using Word = uint64_t __attribute__((may_alias));
    auto* dst = reinterpret_cast<Word*>(q_pack) + (g * quads * 2 + v) * 8 + j;
    for (int64_t d = 0; d < quads; ++d) dst[d * 16] = words[d];
  }
}

void LatentScores(const uint32_t* q_pack, int64_t hp, const uint16_t* const* rows, int64_t n, int64_t row_dim,
                  float* scores, RowPrefetch& next) {
  const int64_t quads = row_dim / 4;
  LinePacer pacer(next);
  for (int64_t g = 0; g < hp / 16; ++g) {
    const uint32_t* qg = q_pack + g * quads * 32;
    for (int64_t r = 0; r < n; r += kScoreRows) {
      WithCount<kScoreRows>(std::min<int64_t>(kScoreRows, n - r), [&](auto count) {
        ScoreBlock<decltype(count)::value>(qg, quads, rows + r, scores + r * hp + g * 16, hp, pacer);
      });
    }
  }
  pacer.Finish(next);
}

void LatentSum(const float* p, int64_t hp, int64_t heads, const float* corr, const uint16_t* const* rows, int64_t n,
               int64_t latent_dim, float* o, RowPrefetch& next) {
  MLA_CHECK(n <= kLatentSumMaxRows && hp <= kLatentSumMaxHeads && heads > 0 && latent_dim > 0 && latent_dim % 32 == 0);
  // The probabilities as bf16 pairs of rows, per head (an odd n's last pair: its only row, with
  // probability 0 the second time).
  alignas(64) uint32_t pp[kLatentSumMaxRows / 2 * kLatentSumMaxHeads];
  const uint16_t* row_a[kLatentSumMaxRows / 2];
  const uint16_t* row_b[kLatentSumMaxRows / 2];
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const int64_t pairs = (n + 1) / 2;
  for (int64_t i = 0; i < pairs; ++i) {
    const int64_t ra = 2 * i, rb = ra + 1 < n ? ra + 1 : ra;
    row_a[i] = rows[ra];
    row_b[i] = rows[rb];
    for (int64_t h = 0; h < hp; h += 16) {
      const __m512 pa = _mm512_loadu_ps(p + ra * hp + h);
      const __m512 pb = rb != ra ? _mm512_loadu_ps(p + rb * hp + h) : _mm512_setzero_ps();
      const __m512i words = (__m512i)_mm512_cvtne2ps_pbh(pb, pa);  // 0-15: row a, 16-31: row b
      _mm512_store_si512(pp + i * hp + h, _mm512_permutexvar_epi16(interleave, words));
    }
  }
  // The next rows' lines latent_scores left, an even share before each block.
  LinePacer pacer(next);
  const int64_t left = next.lines() - next.issued;
  const int64_t blocks = latent_dim / 32 * ((heads + kSumHeads - 1) / kSumHeads);
  int64_t line = 0, block = 0;
  for (int64_t c0 = 0; c0 < latent_dim; c0 += 32) {
    for (int64_t h0 = 0; h0 < heads; h0 += kSumHeads) {
      for (const int64_t until = left * ++block / blocks; line < until; ++line) pacer.Step();
      WithCount<kSumHeads>(std::min<int64_t>(kSumHeads, heads - h0), [&](auto count) {
        SumBlock<decltype(count)::value>(pp, hp, h0, corr, row_a, row_b, pairs, c0, latent_dim, o);
      });
    }
  }
  pacer.Finish(next);
}

}  // namespace mlaserve::avx512bf16
