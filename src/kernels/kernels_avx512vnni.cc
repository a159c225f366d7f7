// The int8 dot-product tables (AVX512-VNNI `vpdpbusd`): an AVX-512 table (fp32 or bf16 products),
// except that products with packed int8-group weights (kInt8Group: GGUF's Q8_0 and Q6_K), int4
// ones (kInt4Group: compressed-tensors' int4-g32, Kimi-K2's experts) and uint4-min and uint8-min
// ones (kUint4GroupMin: Q4_K, Q4_0, Q4_1; kUint8GroupMin: Q5_K) quantize the
// activations to int8 and multiply int8 by int8, four columns per 32-bit lane, summing exactly in
// int32, as llama.cpp does for Q8_0 (its q8_0 activations). The fp32 path widens every code to
// fp32 and multiplies it by its scale (~4 instructions per 16 weights); this is one instruction
// per 64. Whether it wins on a host is measured (kernel_choice.cc), never assumed.
//
// Compiled with -mavx512vnni (CMakeLists.txt: *_avx512vnni.cc): nothing here may run unless
// GetCpuFeatures().avx512_vnni.
//
// Numerics (Int8DotReference in tests/kernels/int8_dot_test.cc computes the same, scalar):
//   activations: per token and per group of the weight's group_cols columns, amax = max |x|,
//     d = amax / 127, q[c] = nearest-even(x[c] * (1 / d)) (d = 0: q = 0), so |q| <= 127;
//   y[t][r] = the groups g in order of  acc = fma(float(sum_c code[r][c] * q[t][c]), s[r][g] * d[t][g], acc)
//     with the integer sum exact (|sum| < 2^24, so its float is exact too); uint4-min weights
//     (code * s - m: GGUF's Q4_K) then  acc = fma(-m[r][g], d[t][g] * float(sum_c q[t][c]), acc).
// vpdpbusd multiplies unsigned bytes by signed ones: int8 codes are offset by 128 (an XOR of the
// sign bit) and every group's sum starts at -128 * sum_c q[t][c] to cancel it; 4-bit codes are
// unsigned already (a mask, and a shift for the high nibbles), int4's stored + 8 (sums start at
// -8 * sum_c q[t][c]).
// Each token's result depends on its own activations alone, and partial sums are stored and
// reloaded exactly between column chunks: the product is batch-invariant.
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"

namespace mlaserve {
namespace avx512vnni {
namespace {

// Tokens per register tile (TokenBlock): 6 x 2 int32 sums and 6 x 2 fp32 outputs, 24 of the 32
// registers. Up to kOnePassTokens tokens go in one tile, so that a few decoding requests read
// each panel once; a prefill's tiles are kTokens (6 measured as fast as 4 or faster once the sums
// stayed in registers: docs/benchmarks.md, "Int8 token tiles in registers").
constexpr int kTokens = 6;
constexpr int kOnePassTokens = 6;
static_assert(kTokens <= kOnePassTokens, "Product's tiles dispatch through WithTokens<kOnePassTokens>");
// Software prefetch distances: codes 2 KB ahead of each panel stream, scales 8 groups ahead, each
// of a group's scale lines (a panel's 16 scales, and its 16 mins where the format has them: with
// the scales' line alone, `bench-kernels`' one-token q4_k row streamed at 59% / 57% / 78% of
// the probe against 71% / 78% / 90% with both, alternating rounds on the AMD host; q8_0 measured
// 1-4 KB alike, all above 1 KB).
constexpr int64_t kPrefetchBytes = 2048;
constexpr int64_t kPrefetchGroups = 8;

// A block reads its two panels side by side, each a code stream and a stream of scale lines:
// each stream prefetches into its own panel of the next block as it nears its end
// (PanelPrefetchAddress), where the next block's second panel started cold (2 KB of codes: an
// eighth of a 512-column Q8_0 pair, a thirty-second at 2048 columns).
constexpr int kPanelsPerBlock = 2;

// What a format's codes and scales are to the kernels.
template <WeightFormat F>
struct CodeFormat {
  static constexpr bool kMins = F == WeightFormat::kUint4GroupMin || F == WeightFormat::kUint8GroupMin;
  static constexpr bool kNibbles = F == WeightFormat::kUint4GroupMin || F == WeightFormat::kInt4Group;
  // What every code's unsigned byte (or nibble) holds above its value, cancelled by starting each
  // group's sum at -kOffset * sum_c q[t][c]: int8 codes get +128 (the sign bit flipped), int4
  // codes are stored +8; the formats with mins hold the value itself.
  static constexpr int kOffset = F == WeightFormat::kInt8Group ? 128 : F == WeightFormat::kInt4Group ? 8 : 0;
  // Bytes of a group's codes per column in a panel: 16 (bytes), 8 (nibbles).
  static constexpr int64_t kColumnBytes = kNibbles ? kPanelRows / 2 : kPanelRows;
  // Bytes of a group's scale lines in a panel: 16 F32 scales (int8), 16 BF16 (int4), or 16 F32
  // scales then 16 F32 mins.
  static constexpr int64_t kScaleBytes = kPanelRows * GroupScaleBytes(F);
  // A panel's 64 bytes of codes as vpdpbusd's unsigned bytes, a row's four in each 32-bit lane.
  // int4 panels hold column pairs ([cols / 2][16] bytes: a pair's 16 rows together): four pairs
  // are transposed to a row per lane (a 4 x 4 dword transpose across the 128-bit lanes, then a
  // 4 x 4 byte transpose within each), so that byte k of lane r holds columns 2k (low nibble) and
  // 2k + 1 (high) of the step; Quantize orders int4 activations to match.
  static __m512i Codes(__m512i b) {
    if constexpr (F == WeightFormat::kInt8Group) {
      return _mm512_xor_si512(b, _mm512_set1_epi8(int8_t(0x80)));
    } else if constexpr (F == WeightFormat::kInt4Group) {
      const __m512i dwords = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
      const __m512i bytes = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
      return _mm512_shuffle_epi8(_mm512_permutexvar_epi32(dwords, b), bytes);
    } else {
      return b;
    }
  }
  // A group's 16 scales in a panel as fp32.
  static __m512 Scales(const std::byte* line) {
    if constexpr (F == WeightFormat::kInt4Group) {
      const __m256i bf16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16), 16));
    } else {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(line));
    }
  }
};

// The packed activations' parts (kernels.h Int8PackedActivationFloats): codes, then per (token,
// group) the scale and the offset's correction.
struct GroupScale {
  float d;      // the group's scale: x ~ q * d
  int32_t sum;  // the sum of the group's q
};
struct Int8Activations {
  int8_t* q;         // [n][cols]
  GroupScale* s;     // [n][cols / group]
};
Int8Activations Parts(float* xp, int64_t n, int64_t cols) {
  auto* base = reinterpret_cast<std::byte*>(xp);
  return {reinterpret_cast<int8_t*>(base), reinterpret_cast<GroupScale*>(base + Int8ActivationCodeBytes(n, cols))};
}

// One group of `cols` values (x(c) gives the 16 from column c, masked lanes zero) quantized:
// amax = max |x|, d = amax / 127, codes = nearest-even(x * (1 / d)) clamped to +-127 (d = 0:
// zeros), stored through `order` (a byte shuffle within each 16); with kSum, their sum.
template <bool kSum, class LoadX>
[[gnu::always_inline]] inline GroupScale QuantizeGroup(LoadX x, int64_t cols, const __m128i order, int8_t* codes) {
  const auto mask = [&](int64_t c) { return cols - c >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (cols - c)) - 1); };
  __m512 amax = _mm512_setzero_ps();
  for (int64_t c = 0; c < cols; c += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(x(c, mask(c))));
  const float d = _mm512_reduce_max_ps(amax) / 127.0f;
  const __m512 inv = _mm512_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
  __m512i sum = _mm512_setzero_si512();
  for (int64_t c = 0; c < cols; c += 16) {
    // Nearest-even (the MXCSR default), clamped for safety: |x * inv| <= 127 up to rounding.
    __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(x(c, mask(c)), inv));
    v = _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
    if constexpr (kSum) sum = _mm512_add_epi32(sum, v);  // masked lanes are zero
    _mm_mask_storeu_epi8(codes + c, mask(c), _mm_shuffle_epi8(_mm512_cvtepi32_epi8(v), order));
  }
  return {d, kSum ? _mm512_reduce_add_epi32(sum) : 0};
}

// Quantizes token rows [t_begin, t_end) of x ([n][cols]) per group of `group` columns.
// pair_order (int4 weights, CodeFormat::Codes): each 8 columns stored as 0, 2, 4, 6, 1, 3, 5, 7.
void Quantize(const float* x, int64_t cols, int64_t group, int64_t t_begin, int64_t t_end, Int8Activations a,
              bool pair_order) {
  const __m128i order = pair_order ? _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15)
                                   : _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const int64_t groups = cols / group;
  for (int64_t t = t_begin; t < t_end; ++t) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = x + t * cols + g * group;
      const auto load = [xg](int64_t c, __mmask16 m) { return _mm512_maskz_loadu_ps(m, xg + c); };
      a.s[t * groups + g] = QuantizeGroup<true>(load, group, order, a.q + t * cols + g * group);
    }
  }
}

// The two panels' row masks of a 32-row block of which rows_valid rows are stored.
struct RowMasks {
  __mmask16 m0, m1;
};
inline RowMasks BlockRowMasks(int rows_valid) {
  return {rows_valid >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << rows_valid) - 1),
          rows_valid >= 32   ? __mmask16(0xFFFF)
          : rows_valid <= 16 ? __mmask16(0)
                             : __mmask16((1u << (rows_valid - 16)) - 1)};
}

// A block's prefetch of each panel's scale lines kPrefetchGroups groups on from the group at byte
// scale_pos of the panels' scale streams (and its mins' line, where the format has mins).
template <WeightFormat F>
[[gnu::always_inline]] inline void PrefetchScaleLines(const std::byte* const (&scales)[2], int64_t scale_pos,
                                                      int64_t scale_stream_bytes) {
  constexpr int64_t kScaleAhead = kPrefetchGroups * CodeFormat<F>::kScaleBytes;
  for (const std::byte* s : scales) {
    _mm_prefetch(PanelPrefetchAddress(s + scale_pos, scale_pos, kScaleAhead, scale_stream_bytes, kPanelsPerBlock),
                 _MM_HINT_T0);
    if constexpr (CodeFormat<F>::kMins) {
      _mm_prefetch(
          PanelPrefetchAddress(s + scale_pos + 64, scale_pos, kScaleAhead, scale_stream_bytes, kPanelsPerBlock),
          _MM_HINT_T0);
    }
  }
}

// One step of a block: 64 bytes of each of its two panels' codes at column c, as vpdpbusd's
// unsigned bytes (CodeFormat::Codes; nibbles still two to a byte), each panel's stream prefetched
// kPrefetchBytes on where kPrefetch.
template <WeightFormat F, bool kPrefetch>
[[gnu::always_inline]] inline void BlockStepCodes(const std::byte* const (&p)[2], int64_t c, int64_t code_stream_bytes,
                                                  __m512i& b0, __m512i& b1) {
  constexpr int64_t kColumnBytes = CodeFormat<F>::kColumnBytes;
  const std::byte* w0 = p[0] + c * kColumnBytes;
  const std::byte* w1 = p[1] + c * kColumnBytes;
  if constexpr (kPrefetch) {
    _mm_prefetch(PanelPrefetchAddress(w0, c * kColumnBytes, kPrefetchBytes, code_stream_bytes, kPanelsPerBlock),
                 _MM_HINT_T0);
    _mm_prefetch(PanelPrefetchAddress(w1, c * kColumnBytes, kPrefetchBytes, code_stream_bytes, kPanelsPerBlock),
                 _MM_HINT_T0);
  }
  b0 = CodeFormat<F>::Codes(_mm512_loadu_si512(w0));
  b1 = CodeFormat<F>::Codes(_mm512_loadu_si512(w1));
}

// Rows [row0, row0 + 32) (rows_valid of them stored; p[1] may repeat p[0] past the matrix), for
// one token, over the groups [g_begin, g_end): y (partial sums; zero when `first`) += each group's
// product, in group order. F: int8 codes (offset by the sign bit's flip), int4 codes (stored + 8;
// pairs transposed by CodeFormat::Codes), or uint4-min / uint8-min codes (unsigned already; no
// offset) whose group product then subtracts min * d * sum q. Two integer sums a panel take turns
// (bytes: alternate 4-column steps; nibbles: the low ones into the first, the high ones into the
// second), added at the group's end: the same exact sum, so the same result, where a single chain
// made every step wait on the previous vpdpbusd (a nibble step two of them in a row). kGroup: a
// byte group's columns where known (32: Q8_0, Q5_K, Q5_0, Q5_1; int8 codes' 16: Q6_K), its steps
// unrolled (Q8_0's attention projections at one token ran 5-10% faster: docs/benchmarks.md, "One
// token: a byte group's steps unrolled"), else 0 (w.block_cols; nibble groups, which measured no
// faster unrolled). More tokens: TokenBlock.
template <WeightFormat F, int kGroup>
void Block(const Int8Activations& a, int64_t cols, const WeightMatrix& w, const std::byte* const (&p)[2],
           const std::byte* const (&scales)[2], int64_t g_begin, int64_t g_end, bool first, float* y,
           int rows_valid) {
  const int64_t group = kGroup != 0 ? kGroup : w.block_cols;
  const int64_t groups = cols / group;
  const auto [m0, m1] = BlockRowMasks(rows_valid);
  __m512 out0 = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, y);
  __m512 out1 = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, y + 16);
  using Format = CodeFormat<F>;
  constexpr bool kMin = Format::kMins, kNibbles = Format::kNibbles;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  constexpr int64_t kColumnBytes = Format::kColumnBytes, kScaleBytes = Format::kScaleBytes;
  // Each panel's streams: its codes, and its groups' scale lines.
  const int64_t code_stream_bytes = cols * kColumnBytes, scale_stream_bytes = groups * kScaleBytes;
  // The sums of a chain: panel 0's and panel 1's.
  struct Chain {
    __m512i s0, s1;
  };
  const auto dot = [&](Chain& chain, __m512i u0, __m512i u1, int64_t c) {
    int32_t word;
    std::memcpy(&word, a.q + c, 4);
    const __m512i xq = _mm512_set1_epi32(word);
    chain.s0 = _mm512_dpbusd_epi32(chain.s0, u0, xq);
    chain.s1 = _mm512_dpbusd_epi32(chain.s1, u1, xq);
  };
  for (int64_t g = g_begin; g < g_end; ++g) {
    const __m512i offset = _mm512_set1_epi32(-Format::kOffset * a.s[g].sum);
    Chain chain0{offset, offset}, chain1{_mm512_setzero_si512(), _mm512_setzero_si512()};
    // One step: 64 bytes of each panel, columns c .. c + 3 (nibbles: c + 7), into `chain` (a
    // nibble step's high nibbles into the second chain).
    const auto step = [&](Chain& chain, int64_t c) {
      __m512i b0, b1;
      BlockStepCodes<F, true>(p, c, code_stream_bytes, b0, b1);
      if constexpr (kNibbles) {
        dot(chain, _mm512_and_si512(b0, nibble), _mm512_and_si512(b1, nibble), c);
        dot(chain1, _mm512_and_si512(_mm512_srli_epi16(b0, 4), nibble),
            _mm512_and_si512(_mm512_srli_epi16(b1, 4), nibble), c + 4);
      } else {
        dot(chain, b0, b1, c);
      }
    };
    const int64_t c_end = (g + 1) * group;
    int64_t c = g * group;
    if constexpr (kNibbles) {
      for (; c < c_end; c += 8) step(chain0, c);
    } else {
#pragma GCC unroll 8
      for (; c + 8 <= c_end; c += 8) {
        step(chain0, c);
        step(chain1, c + 4);
      }
      if (c < c_end) step(chain0, c);
    }
    const __m512i sum0 = _mm512_add_epi32(chain0.s0, chain1.s0);
    const __m512i sum1 = _mm512_add_epi32(chain0.s1, chain1.s1);
    const int64_t scale_pos = g * kScaleBytes;
    const std::byte* f0 = scales[0] + scale_pos;
    const std::byte* f1 = scales[1] + scale_pos;
    PrefetchScaleLines<F>(scales, scale_pos, scale_stream_bytes);
    const __m512 d = _mm512_set1_ps(a.s[g].d);
    out0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum0), _mm512_mul_ps(Format::Scales(f0), d), out0);
    out1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum1), _mm512_mul_ps(Format::Scales(f1), d), out1);
    if constexpr (kMin) {
      const __m512 min0 = _mm512_loadu_ps(reinterpret_cast<const float*>(f0) + kPanelRows);
      const __m512 min1 = _mm512_loadu_ps(reinterpret_cast<const float*>(f1) + kPanelRows);
      const __m512 dq = _mm512_set1_ps(a.s[g].d * float(a.s[g].sum));
      out0 = _mm512_fnmadd_ps(min0, dq, out0);
      out1 = _mm512_fnmadd_ps(min1, dq, out1);
    }
  }
  _mm512_mask_storeu_ps(y, m0, out0);
  _mm512_mask_storeu_ps(y + 16, m1, out1);
}

// Block's product for a tile of T >= 2 tokens (a prefill's tiles, a few decoding requests): one
// integer sum a (token, panel), the same exact sums, and the same fp32 operations per output in
// the same order, so each token's outputs are bit for bit what Block gives it alone. Every token
// loop unrolled and no array passed by reference, so that the T x 2 sums and outputs stay in
// registers (with a step lambda over arrays of sums and outputs, GCC kept them on the stack and
// copied every sum between iterations). kPrefetch: the tile streams the block from memory (a
// column chunk's first tile); later tiles find it in L1. kGroup: the group's columns where known
// (32 or 16: the group's steps unrolled, which kept GCC from copying each sum between steps), else
// 0 (w.block_cols).
template <int T, WeightFormat F, bool kPrefetch, int kGroup>
void TokenBlock(const Int8Activations& a, int64_t cols, const WeightMatrix& w, const std::byte* const (&p)[2],
                const std::byte* const (&scales)[2], int64_t g_begin, int64_t g_end, bool first, float* y,
                int64_t ldy, int rows_valid) {
  using Format = CodeFormat<F>;
  constexpr bool kMin = Format::kMins, kNibbles = Format::kNibbles;
  constexpr int64_t kColumnBytes = Format::kColumnBytes, kScaleBytes = Format::kScaleBytes;
  // Columns a step: 64 bytes of each panel (bytes: 4 columns, one chain; OnePanel's steps take
  // 8, two chains; nibbles: 8).
  constexpr int64_t kStepColumns = kNibbles ? 8 : 4;
  const int64_t group = kGroup != 0 ? kGroup : w.block_cols;
  const int64_t groups = cols / group;
  const int64_t code_stream_bytes = cols * kColumnBytes, scale_stream_bytes = groups * kScaleBytes;
  const auto [m0, m1] = BlockRowMasks(rows_valid);
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const int8_t* const q = a.q;
  __m512 out0[T], out1[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    out0[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, y + t * ldy);
    out1[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, y + t * ldy + 16);
  }
  for (int64_t g = g_begin; g < g_end; ++g) {
    __m512i sum0[T], sum1[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) sum0[t] = sum1[t] = _mm512_set1_epi32(-Format::kOffset * a.s[t * groups + g].sum);
#pragma GCC unroll 8
    for (int64_t step = 0; step < group / kStepColumns; ++step) {
      const int64_t c = g * group + step * kStepColumns;
      __m512i b0, b1;
      BlockStepCodes<F, kPrefetch>(p, c, code_stream_bytes, b0, b1);
      if constexpr (kNibbles) {
        const __m512i lo0 = _mm512_and_si512(b0, nibble), lo1 = _mm512_and_si512(b1, nibble);
        const __m512i hi0 = _mm512_and_si512(_mm512_srli_epi16(b0, 4), nibble);
        const __m512i hi1 = _mm512_and_si512(_mm512_srli_epi16(b1, 4), nibble);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          int32_t word[2];
          std::memcpy(word, q + t * cols + c, 8);
          const __m512i x0 = _mm512_set1_epi32(word[0]), x1 = _mm512_set1_epi32(word[1]);
          sum0[t] = _mm512_dpbusd_epi32(sum0[t], lo0, x0);
          sum1[t] = _mm512_dpbusd_epi32(sum1[t], lo1, x0);
          sum0[t] = _mm512_dpbusd_epi32(sum0[t], hi0, x1);
          sum1[t] = _mm512_dpbusd_epi32(sum1[t], hi1, x1);
        }
      } else {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          int32_t word;
          std::memcpy(&word, q + t * cols + c, 4);
          const __m512i x = _mm512_set1_epi32(word);
          sum0[t] = _mm512_dpbusd_epi32(sum0[t], b0, x);
          sum1[t] = _mm512_dpbusd_epi32(sum1[t], b1, x);
        }
      }
    }
    const int64_t scale_pos = g * kScaleBytes;
    const std::byte* f0 = scales[0] + scale_pos;
    const std::byte* f1 = scales[1] + scale_pos;
    if constexpr (kPrefetch) PrefetchScaleLines<F>(scales, scale_pos, scale_stream_bytes);
    const __m512 s0 = Format::Scales(f0), s1 = Format::Scales(f1);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 d = _mm512_set1_ps(a.s[t * groups + g].d);
      out0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum0[t]), _mm512_mul_ps(s0, d), out0[t]);
      out1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum1[t]), _mm512_mul_ps(s1, d), out1[t]);
    }
    if constexpr (kMin) {
      const __m512 min0 = _mm512_loadu_ps(reinterpret_cast<const float*>(f0) + kPanelRows);
      const __m512 min1 = _mm512_loadu_ps(reinterpret_cast<const float*>(f1) + kPanelRows);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m512 dq = _mm512_set1_ps(a.s[t * groups + g].d * float(a.s[t * groups + g].sum));
        out0[t] = _mm512_fnmadd_ps(min0, dq, out0[t]);
        out1[t] = _mm512_fnmadd_ps(min1, dq, out1[t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    _mm512_mask_storeu_ps(y + t * ldy, m0, out0[t]);
    _mm512_mask_storeu_ps(y + t * ldy + 16, m1, out1[t]);
  }
}

// One 8-column step of a panel's codes at `at` (columns c .. c + 7) as vpdpbusd's unsigned bytes:
// u0 columns c .. c + 3, u1 c + 4 .. c + 7 (nibbles: the low and the high ones of 64 bytes;
// bytes: two 64-byte loads), each line prefetched `ahead` bytes on. OnePanel's step and the
// grouped query's (QueryPanels), so that both form the same exact sums.
template <WeightFormat F>
[[gnu::always_inline]] inline void StepCodes(const std::byte* at, int64_t ahead, __m512i& u0, __m512i& u1) {
  using Format = CodeFormat<F>;
  _mm_prefetch(reinterpret_cast<const char*>(at) + ahead, _MM_HINT_T0);
  if constexpr (Format::kNibbles) {
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    const __m512i b = Format::Codes(_mm512_loadu_si512(at));
    u0 = _mm512_and_si512(b, nibble);
    u1 = _mm512_and_si512(_mm512_srli_epi16(b, 4), nibble);
  } else {
    _mm_prefetch(reinterpret_cast<const char*>(at) + ahead + 64, _MM_HINT_T0);
    u0 = Format::Codes(_mm512_loadu_si512(at));
    u1 = Format::Codes(_mm512_loadu_si512(at + 64));
  }
}

// Block's product for one token over one panel's 16 rows (rows_valid of them stored), all groups in
// one pass: the same integer sums and the same fp32 operations per output in the same order, so
// bit for bit what Block gives those rows. The dot products run in two chains (nibbles: the low
// and the high ones, per 8 columns one vpdpbusd in each; bytes: alternate 4-column steps), added
// at the group's end. Product takes it for the unpaired last panel of a single token's product,
// where Block would multiply that panel twice (the absorbed decode multiplies W_UK^T copies a
// panel a call where its groups are 16 rows: Q6_K).
template <WeightFormat F>
void OnePanel(const Int8Activations& a, const WeightMatrix& w, const std::byte* panel, const std::byte* scales,
              float* y, int rows_valid) {
  const int64_t group = w.block_cols;
  const __mmask16 mask = rows_valid >= kPanelRows ? __mmask16(0xFFFF) : __mmask16((1u << rows_valid) - 1);
  using Format = CodeFormat<F>;
  constexpr bool kMin = Format::kMins, kNibbles = Format::kNibbles;
  constexpr int64_t kColumnBytes = Format::kColumnBytes, kScaleBytes = Format::kScaleBytes;
  // Columns per step: 64 bytes of nibbles, or two 64-byte loads of bytes. Nibble groups are whole
  // steps (Int8DotMultiplies asks block_cols % 8 == 0 of them); byte groups may end in 4 columns.
  constexpr int64_t kStepColumns = 8;
  __m512 out = _mm512_setzero_ps();
  for (int64_t g = 0; g < w.cols / group; ++g) {
    __m512i chain0 = _mm512_set1_epi32(-Format::kOffset * a.s[g].sum);
    __m512i chain1 = _mm512_setzero_si512();
    const int64_t c_end = (g + 1) * group;
    int64_t c = g * group;
    for (; c + kStepColumns <= c_end; c += kStepColumns) {
      int32_t word[2];
      std::memcpy(word, a.q + c, 8);
      __m512i u0, u1;
      StepCodes<F>(panel + c * kColumnBytes, kPrefetchBytes, u0, u1);
      chain0 = _mm512_dpbusd_epi32(chain0, u0, _mm512_set1_epi32(word[0]));
      chain1 = _mm512_dpbusd_epi32(chain1, u1, _mm512_set1_epi32(word[1]));
    }
    if constexpr (!kNibbles) {  // a group of 4 (mod 8) columns: its last 4 in the first chain
      if (c < c_end) {
        int32_t word;
        std::memcpy(&word, a.q + c, 4);
        const __m512i u = Format::Codes(_mm512_loadu_si512(panel + c * kColumnBytes));
        chain0 = _mm512_dpbusd_epi32(chain0, u, _mm512_set1_epi32(word));
      }
    }
    const std::byte* f = scales + g * kScaleBytes;
    _mm_prefetch(reinterpret_cast<const char*>(f + kPrefetchGroups * kScaleBytes), _MM_HINT_T0);
    const __m512 d = _mm512_set1_ps(a.s[g].d);
    const __m512i sum = _mm512_add_epi32(chain0, chain1);
    out = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(Format::Scales(f), d), out);
    if constexpr (kMin) {
      _mm_prefetch(reinterpret_cast<const char*>(f + kPrefetchGroups * kScaleBytes + 64), _MM_HINT_T0);
      const __m512 mins = _mm512_loadu_ps(reinterpret_cast<const float*>(f) + kPanelRows);
      out = _mm512_fnmadd_ps(mins, _mm512_set1_ps(a.s[g].d * float(a.s[g].sum)), out);
    }
  }
  _mm512_mask_storeu_ps(y, mask, out);
}

// fn(std::integral_constant<WeightFormat, F>{}) for the format F of a matrix Int8DotMultiplies.
template <class Fn>
inline void WithCodeFormat(WeightFormat format, Fn&& fn) {
  switch (format) {
    case WeightFormat::kUint4GroupMin: return fn(std::integral_constant<WeightFormat, WeightFormat::kUint4GroupMin>{});
    case WeightFormat::kUint8GroupMin: return fn(std::integral_constant<WeightFormat, WeightFormat::kUint8GroupMin>{});
    case WeightFormat::kInt4Group: return fn(std::integral_constant<WeightFormat, WeightFormat::kInt4Group>{});
    default: return fn(std::integral_constant<WeightFormat, WeightFormat::kInt8Group>{});
  }
}

template <int kMax, class Fn>
inline void WithTokens(int n, Fn&& fn) {
  if constexpr (kMax > 0) {
    if (n == kMax) return fn(std::integral_constant<int, kMax>{});
    WithTokens<kMax - 1>(n, fn);
  }
}

// fn(std::integral_constant<int, G>{}): G the group's columns a block kernel unrolls its steps
// for (32, and int8 codes' 16: Q6_K), else 0 (steps at run time; about 90 TokenBlock
// instantiations in all). kUnrollNibbles: nibble groups of 32 unroll too (TokenBlock; the
// one-token Block measured no faster with them: docs/benchmarks.md, "One token: a byte group's
// steps unrolled").
template <WeightFormat F, bool kUnrollNibbles, class Fn>
inline void WithGroupColumns(int64_t block_cols, Fn&& fn) {
  if constexpr (kUnrollNibbles || !CodeFormat<F>::kNibbles) {
    if (block_cols == 32) return fn(std::integral_constant<int, 32>{});
  }
  if constexpr (F == WeightFormat::kInt8Group) {
    if (block_cols == 16) return fn(std::integral_constant<int, 16>{});
  }
  fn(std::integral_constant<int, 0>{});
}

// Panels [panel_begin, panel_end) for n tokens from quantized activations. Blocks of 32 rows
// outermost, then chunks of columns (whole groups, ~512 columns: the block's 16 KB of codes stay in
// L1 while every token tile passes), then tiles of kTokens tokens (an unpaired last panel of one
// token: OnePanel).
void Product(const Int8Activations& a, int64_t n, const WeightMatrix& w, int64_t panel_begin, int64_t panel_end,
             float* y, int64_t ldy) {
  const int64_t group = w.block_cols;
  const int64_t chunk_groups = std::max<int64_t>(1, kGemmColumns / group);
  const int64_t groups = w.cols / group;
  const int64_t row_end = std::min(w.rows, panel_end * kPanelRows);
  const auto* scale_base = static_cast<const std::byte*>(w.scales);
  const size_t panel_scale_bytes = size_t(groups) * kPanelRows * size_t(w.group_scale_bytes());
  assert(panel_end <= w.num_panels());
  const auto one_panel = [&](int64_t panel) {
    const int rows_valid = int(std::min<int64_t>(kPanelRows, row_end - panel * kPanelRows));
    const std::byte* scales = scale_base + size_t(panel) * panel_scale_bytes;
    float* out = y + panel * kPanelRows;
    WithCodeFormat(w.format, [&](auto format) {
      OnePanel<decltype(format)::value>(a, w, w.panel(panel), scales, out, rows_valid);
    });
  };
  for (int64_t row0 = panel_begin * kPanelRows; row0 < row_end; row0 += 2 * kPanelRows) {
    const int64_t panel0 = row0 / kPanelRows;
    const int64_t panel1 = row0 + kPanelRows < row_end ? panel0 + 1 : panel0;
    // Panels side by side: two (the activations' words serve both), but a single token takes a
    // pair that has one panel alone (OnePanel: Block would multiply it twice). Uint4-min codes
    // (GGUF's Q4_K, Q4_0, Q4_1) took every panel alone at one token, so that a thread streamed
    // one panel's codes and scale lines, not two of each; since Block runs two chains a panel at
    // one token, its pairs measured no slower (docs/benchmarks.md, "One token's int8 block in two
    // chains").
    if (n == 1 && panel1 == panel0) {
      one_panel(panel0);
      continue;
    }
    const std::byte* p[2] = {w.panel(panel0), w.panel(panel1)};
    const std::byte* scales[2] = {scale_base + size_t(panel0) * panel_scale_bytes,
                                  scale_base + size_t(panel1) * panel_scale_bytes};
    const int rows_valid = int(std::min<int64_t>(2 * kPanelRows, row_end - row0));
    for (int64_t g0 = 0; g0 < groups; g0 += chunk_groups) {
      const int64_t g1 = std::min(groups, g0 + chunk_groups);
      const int64_t tile = n <= kOnePassTokens ? n : kTokens;
      for (int64_t t0 = 0; t0 < n; t0 += tile) {
        const Int8Activations at{a.q + t0 * w.cols, a.s + t0 * groups};
        WithTokens<kOnePassTokens>(int(std::min<int64_t>(tile, n - t0)), [&](auto tokens) {
          WithCodeFormat(w.format, [&](auto format) {
            constexpr int kTileTokens = decltype(tokens)::value;
            constexpr WeightFormat kFormat = decltype(format)::value;
            float* const out = y + t0 * ldy + row0;
            if constexpr (kTileTokens == 1) {
              WithGroupColumns<kFormat, false>(w.block_cols, [&](auto group_cols) {
                Block<kFormat, decltype(group_cols)::value>(at, w.cols, w, p, scales, g0, g1, g0 == 0, out,
                                                            rows_valid);
              });
            } else {
              WithGroupColumns<kFormat, true>(w.block_cols, [&](auto group_cols) {
                constexpr int kGroupCols = decltype(group_cols)::value;
                if (t0 == 0) {  // the first tile streams the block
                  TokenBlock<kTileTokens, kFormat, true, kGroupCols>(at, w.cols, w, p, scales, g0, g1, g0 == 0,
                                                                     out, ldy, rows_valid);
                } else {
                  TokenBlock<kTileTokens, kFormat, false, kGroupCols>(at, w.cols, w, p, scales, g0, g1, g0 == 0,
                                                                      out, ldy, rows_valid);
                }
              });
            }
          });
        });
      }
    }
  }
}


// One group's query codes: QuantizeGroup of x = q * s (one fp32 multiply each, formed in
// registers), so the codes and scale Quantize gives the plain path's scaled copy. The codes' sum
// only where the format's offset needs it (int8; the copy's mins are zero, so uint4-min and
// uint8-min never read it).
template <bool kSum>
[[gnu::always_inline]] inline GroupScale QuantizeScaled(const float* q, const float* s, int64_t cols, int8_t* codes) {
  const auto load = [q, s](int64_t c, __mmask16 m) {
    return _mm512_mul_ps(_mm512_maskz_loadu_ps(m, q + c), _mm512_maskz_loadu_ps(m, s + c));
  };
  return QuantizeGroup<kSum>(load, cols, _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), codes);
}

// kPanels (1 or 2) consecutive panels of a W_UK^T copy for one group's query codes (one token),
// all `cols` columns (one group of the copy): each panel's sums in two chains as OnePanel's (so
// the same exact integer sums), the query's words broadcast once for both panels; then
// y = fma(float(sum), d, 0) - min_sum: what OnePanel gives with the copy's unit scale and zero
// min, less the group's min sum as the plain path subtracts it.
template <WeightFormat F, int kPanels>
void QueryPanels(const int8_t* codes, GroupScale scale, int64_t cols, const std::byte* panel, float min_sum,
                 float* y) {
  using Format = CodeFormat<F>;
  constexpr int64_t kColumnBytes = Format::kColumnBytes;
  const int64_t panel_bytes = cols * kColumnBytes;
  // Prefetches land at the same place in a later pair (the copy's panels, and its groups, lie
  // one after another): whole pairs ahead, at least kPrefetchBytes. (kPrefetchBytes itself would
  // land in the pair's own second panel where a panel is 2 KB: Q8_0's at nope 128.)
  const int64_t pair_bytes = kPanels * panel_bytes;
  const int64_t ahead = (kPrefetchBytes + pair_bytes - 1) / pair_bytes * pair_bytes;
  __m512i chain[kPanels][2];
#pragma GCC unroll 2
  for (int p = 0; p < kPanels; ++p) {
    chain[p][0] = _mm512_set1_epi32(-Format::kOffset * scale.sum);
    chain[p][1] = _mm512_setzero_si512();
  }
  for (int64_t c = 0; c < cols; c += 8) {  // columns c .. c + 7 (whole steps: TransposedCopyPays)
    int32_t word[2];
    std::memcpy(word, codes + c, 8);
    const __m512i x0 = _mm512_set1_epi32(word[0]), x1 = _mm512_set1_epi32(word[1]);
#pragma GCC unroll 2
    for (int p = 0; p < kPanels; ++p) {
      __m512i u0, u1;
      StepCodes<F>(panel + p * panel_bytes + c * kColumnBytes, ahead, u0, u1);
      chain[p][0] = _mm512_dpbusd_epi32(chain[p][0], u0, x0);
      chain[p][1] = _mm512_dpbusd_epi32(chain[p][1], u1, x1);
    }
  }
  const __m512 d = _mm512_set1_ps(scale.d), m = _mm512_set1_ps(min_sum);
#pragma GCC unroll 2
  for (int p = 0; p < kPanels; ++p) {
    const __m512 out = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(chain[p][0], chain[p][1])), d,
                                       _mm512_setzero_ps());
    _mm512_storeu_ps(y + p * kPanelRows, _mm512_sub_ps(out, m));
  }
}

// KernelSet::grouped_query_product for one format, in the order the head's bytes lie (its table's
// scales, its mins, then the copy's codes): every group's query quantized first (QuantizeScaled;
// the groups independent, so their reductions overlap), then the min sums (fma in d order: whole
// vectors of groups as AxpyF32 takes them, a tail through axpy_tail, the base table's axpy_f32:
// the plain path's), then the panels two at a time (QueryPanels). Bit for bit the plain path:
// the same codes, exact integer sums, and one rounding each for the scale and the min sum.
template <WeightFormat F>
void GroupedQuery(const float* q, const float* scales, const float* mins, const WeightMatrix& w, int64_t group_rows,
                  const float* next_scales, float* y, void (*axpy_tail)(float, const float*, float*, int64_t)) {
  const int64_t nope = w.cols, groups = w.rows / group_rows;
  assert(nope <= kGroupedQueryMaxCols && nope % 8 == 0 && groups <= kGroupedQueryMaxGroups &&
         group_rows % kPanelRows == 0 && w.block_cols == nope && w.rows % group_rows == 0);
  alignas(64) int8_t codes[kGroupedQueryMaxGroups * kGroupedQueryMaxCols];
  GroupScale scale[kGroupedQueryMaxGroups];
  for (int64_t g = 0; g < groups; ++g) {
    // The copy's first codes meanwhile (QueryPanels' prefetch runs a pair, at least
    // kPrefetchBytes, ahead of its reads: up to 4 KB at nope 128).
    for (int64_t at = g * 64; at < 2 * kPrefetchBytes; at += groups * 64) {
      _mm_prefetch(static_cast<const char*>(w.data) + at, _MM_HINT_T0);
    }
    scale[g] = QuantizeScaled<CodeFormat<F>::kOffset != 0>(q, scales + g * nope, nope, codes + g * nope);
  }
  alignas(64) float min_sums[kGroupedQueryMaxGroups] = {};
  if (mins != nullptr) {
    const int64_t whole = groups / 16 * 16;
    for (int64_t g = 0; g < whole; g += 16) {  // each vector's sums in a register, d in order
      __m512 sum = _mm512_setzero_ps();
      for (int64_t d = 0; d < nope; ++d) {
        sum = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), _mm512_loadu_ps(mins + d * groups + g), sum);
      }
      _mm512_store_ps(min_sums + g, sum);
    }
    for (int64_t d = 0; whole < groups && d < nope; ++d) {
      axpy_tail(q[d], mins + d * groups + whole, min_sums + whole, groups - whole);
    }
  }
  const int64_t panels_per_group = group_rows / kPanelRows;
  // The next head's table into L2 while the codes are multiplied, a line or two a group.
  const int64_t next_lines = next_scales == nullptr ? 0 : (groups * nope * (mins != nullptr ? 2 : 1) * 4 + 63) / 64;
  const int64_t lines_per_group = (next_lines + groups - 1) / groups;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t line = g * lines_per_group; line < std::min(next_lines, (g + 1) * lines_per_group); ++line) {
      _mm_prefetch(reinterpret_cast<const char*>(next_scales) + line * 64, _MM_HINT_T1);
    }
    int64_t p = g * panels_per_group;
    const int64_t end = p + panels_per_group;
    for (; p + 2 <= end; p += 2) {
      QueryPanels<F, 2>(codes + g * nope, scale[g], nope, w.panel(p), min_sums[g], y + p * kPanelRows);
    }
    if (p < end) QueryPanels<F, 1>(codes + g * nope, scale[g], nope, w.panel(p), min_sums[g], y + p * kPanelRows);
  }
}

// The table with int8 products over the AVX-512 table kBase names (0: fp32; else the bf16 table
// from that many tokens).
template <int kBase>
struct Int8Over {
  static const KernelSet& Base() { return kBase == 0 ? *Avx512Kernels() : *Avx512Bf16Kernels(kBase); }

  // Without packed activations (no scratch): quantized here, into this thread's buffer (grown
  // once to the largest product it saw; the model's products come packed).
  static void MatMulPanels(const float* x, int64_t n, const WeightMatrix& w, int64_t panel_begin, int64_t panel_end,
                           float* y, int64_t ldy) {
    if (!Int8DotMultiplies(w)) return Base().matmul_panels(x, n, w, panel_begin, panel_end, y, ldy);
    thread_local std::vector<float> xp;
    const size_t floats = size_t(Int8PackedActivationFloats(n, w.cols, w.block_cols));
    if (xp.size() < floats) xp.resize(floats);
    const Int8Activations a = Parts(xp.data(), n, w.cols);
    Quantize(x, w.cols, w.block_cols, 0, n, a, w.format == WeightFormat::kInt4Group);
    Product(a, n, w, panel_begin, panel_end, y, ldy);
  }
  static void PackActivations(const float* x, int64_t n, const WeightMatrix& w, int64_t tile_begin, int64_t tile_end,
                              float* xp) {
    if (!Int8DotMultiplies(w)) return Base().pack_activations(x, n, w, tile_begin, tile_end, xp);
    Quantize(x, w.cols, w.block_cols, tile_begin * kGemmTileTokens, std::min(n, tile_end * kGemmTileTokens),
             Parts(xp, n, w.cols), w.format == WeightFormat::kInt4Group);
  }
  static void MatMulPanelsPacked(const float* x, const float* xp, float* scratch, int64_t n, const WeightMatrix& w,
                                 int64_t panel_begin, int64_t panel_end, float* y, int64_t ldy) {
    if (!Int8DotMultiplies(w)) return Base().matmul_panels_packed(x, xp, scratch, n, w, panel_begin, panel_end, y, ldy);
    Product(Parts(const_cast<float*>(xp), n, w.cols), n, w, panel_begin, panel_end, y, ldy);
  }

  static void GroupedQueryProduct(const float* q, const float* scales, const float* mins, const WeightMatrix& w,
                                  int64_t group_rows, const float* next_scales, float* y) {
    assert(GroupedQueryProductTakes(w));
    WithCodeFormat(w.format, [&](auto format) {
      GroupedQuery<decltype(format)::value>(q, scales, mins, w, group_rows, next_scales, y, Base().axpy_f32);
    });
  }

  static KernelSet Make(const char* name) {
    KernelSet k = Base();
    k.grouped_query_product = GroupedQueryProduct;
    k.name = name;
    k.int8_dot = true;
    k.matmul_panels = MatMulPanels;
    k.pack_activations = PackActivations;
    k.matmul_panels_packed = MatMulPanelsPacked;
    return k;
  }
};

// The one table over kBase, made on first use.
template <int kBase>
const KernelSet* TableOver(const char* name) {
  static const KernelSet k = Int8Over<kBase>::Make(name);
  return &k;
}

}  // namespace
}  // namespace avx512vnni

const KernelSet* WithInt8Dot(const KernelSet* base) {
  using namespace avx512vnni;
  if (base == nullptr || !CpuSupportsInt8Dot()) return nullptr;
  if (base->int8_dot) return base;
  if (base == Avx512Kernels()) return TableOver<0>("avx512+int8");
  if (!CpuSupportsBf16Dot()) return nullptr;
  if (base == Avx512Bf16Kernels(1)) return TableOver<1>("avx512-bf16+int8");
  if (base == Avx512Bf16Kernels(2)) return TableOver<2>("avx512-bf16:2+int8");
  if (base == Avx512Bf16Kernels(17)) return TableOver<17>("avx512-bf16:17+int8");
  if (base == Avx512Bf16Kernels(65)) return TableOver<65>("avx512-bf16:65+int8");
  return nullptr;
}

}  // namespace mlaserve
