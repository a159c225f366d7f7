// The bf16 dot-product tables (AVX512-BF16 `vdpbf16ps`): the AVX-512 table, except that products
// with at least `min_tokens` tokens of packed BF16, fp8-block and int4-g32 weights (and of
// row-major BF16 rows; codes from one token where min_tokens is 2: kernels.h Bf16CodesMinTokens)
// round the activations to bf16 (nearest even) once and multiply bf16 by
// bf16, two columns per instruction, accumulating in fp32 (quantized codes are exact in bf16; their
// scales multiply fp32 partial sums, below). On a host where vdpbf16ps runs at the FMA rate this
// is twice the multiply-adds of the fp32 path; where it runs at half rate it is no faster:
// kernel_choice.cc measures which (docs/kernels.md).
//
// Compiled with -mavx512bf16 (CMakeLists.txt: *_avx512bf16.cc), so nothing here may run unless
// GetCpuFeatures().avx512_bf16. Every other entry (F32/F16 weights, row-major int4, attention's
// gemm_f32, norms, softmax) is the AVX-512 table's; attention's
// latent_* kernels are latent_attention_avx512bf16.cc's.
//
// Numerics: each panel output is the sum over column pairs j, in order, of x[2j] * w[2j] +
// x[2j+1] * w[2j+1] (bf16 products are exact in fp32) into one fp32 accumulator, the partial sum
// stored in y and reloaded exactly between column blocks. The in-register product (matmul_panels)
// and the packed one (pack_activations + matmul_panels_packed) do exactly this, so a token's result
// does not depend on its batch: the table is batch-invariant on its own. (Row-major products:
// below, likewise.)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/latent_attention.h"
#include "kernels/pack.h"
#include "kernels/weight_value.h"

namespace mlaserve {
namespace avx512bf16 {
namespace {

constexpr int64_t kPairsPerBlock = kGemmColumns / 2;
constexpr int kTile = int(kGemmTileTokens);   // tokens of a tile: 12 x 2 accumulators in registers
constexpr int64_t kPanelPairBytes = 2 * kPanelRows * 2;  // two columns of a bf16 panel: 64 bytes
// Tokens the in-register product converts at once.
constexpr int64_t kGroupTokens = 4 * kGemmTileTokens;


// The 16 column pairs of row[0, min(32, left)) rounded to bf16 (nearest even), as uint32 (low
// half: the even column); columns past `left` read as zero.
inline __m512i ConvertPairs(const float* row, int64_t left) {
  const __mmask16 lo_mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
  const __mmask16 hi_mask =
      left >= 32 ? __mmask16(0xFFFF) : left <= 16 ? __mmask16(0) : __mmask16((1u << (left - 16)) - 1);
  // Words 0-15 from the first 16 floats, 16-31 from the next: 16 column pairs in order.
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi_mask, row + 16), _mm512_maskz_loadu_ps(lo_mask, row));
}

// Pairs of columns [0, len) of `tokens` rows of x (cols apart), rounded to bf16 (nearest even),
// in token rows: dst[t * token_stride + pair], 16 pairs at a time. An odd len's last pair has a
// zero high half.
void ConvertRows(const float* x, int64_t cols, int tokens, int64_t len, uint32_t* dst, int64_t token_stride) {
  const int64_t pairs = (len + 1) / 2;
  for (int t = 0; t < tokens; ++t) {
    const float* row = x + t * cols;
    for (int64_t j = 0; j < pairs; j += 16) {
      const int64_t count = std::min<int64_t>(16, pairs - j);
      _mm512_mask_storeu_epi32(dst + t * token_stride + j, __mmask16((1u << count) - 1),
                               ConvertPairs(row + 2 * j, len - 2 * j));
    }
  }
}

// KernelSet::pack_f32_panels: a BF16 panel's column is its 16 rows' values, one vector: loaded
// whole where rows are adjacent (row_stride 1: the transposed values), else gathered (the keys),
// converted by one instruction and stored as 32 bytes; the missing rows of a last panel are zero.
WeightMatrix PackF32PanelsBf16(const float* src, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                               DType dtype, void* dst) {
  if (dtype != DType::kBF16 || row_stride * kPanelRows > (int64_t(1) << 28)) {
    return PackF32Panels(src, rows, cols, row_stride, col_stride, dtype, dst);
  }
  const __m512i lanes16 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i lane_offsets = _mm512_mullo_epi32(lanes16, _mm512_set1_epi32(int32_t(row_stride)));  // floats
  auto* out = static_cast<uint16_t*>(dst);  // [panels][cols][16]
  for (int64_t row0 = 0; row0 < rows; row0 += kPanelRows) {
    const int64_t lanes = std::min<int64_t>(kPanelRows, rows - row0);
    const __mmask16 valid = lanes == kPanelRows ? __mmask16(0xFFFF) : __mmask16((1u << lanes) - 1);
    const float* panel_src = src + row0 * row_stride;
    for (int64_t c = 0; c < cols; ++c, out += kPanelRows) {
      const float* column = panel_src + c * col_stride;
      const __m512 v = row_stride == 1 ? _mm512_maskz_loadu_ps(valid, column)
                                       : _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, lane_offsets, column, 4);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), (__m256i)_mm512_cvtneps_pbh(v));
    }
  }
  return WeightMatrix{.dtype = dtype, .rows = rows, .cols = cols, .data = dst, .packed = true};
}

// Two bf16 panel columns (2j, 2j + 1) as 16 (even, odd) pairs, one per row: word 2i of the result
// is row i of column 2j, word 2i + 1 row i of column 2j + 1.
inline __m512i InterleaveIndex() {
  return _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
                          19, 3, 18, 2, 17, 1, 16, 0);
}
inline __m512bh LoadPanelPair(const std::byte* p, __m512i interleave) {
  return (__m512bh)_mm512_permutexvar_epi16(interleave, _mm512_loadu_si512(p));
}
// The same for a last column 2j without its pair: the odd words are zero.
inline __m512bh LoadPanelLastColumn(const std::byte* p, __m512i interleave) {
  return (__m512bh)_mm512_permutexvar_epi16(interleave, _mm512_maskz_loadu_epi16(0x0000FFFFu, p));
}

// Where a block's activation pairs are: token t's pair j at xb[t * kTokenStride + j], token rows
// (ConvertRows) as both the packed activations (pack_activations: a tile's rows are a column
// block's kPairsPerBlock pairs long) and the in-register product's blocks have them. (Pairs in
// token columns, xb[j * kTile + t], were packed by a transposing store per value: 2.7% of a
// 256-token prefill's samples, docs/benchmarks.md.) The stride is a constant, so each token's pair
// is one load at a fixed offset (a run-time token stride cost the T = 12 kernel a third of its
// speed).
template <int64_t kTokenStride>
struct PairLayout {
  const uint32_t* xb;
};

// acc[t][v] += w[v] . the tokens' pair at xb_pair (one column pair of T tokens).
template <int T, int64_t kTokenStride>
__attribute__((always_inline)) inline void DotPair(const uint32_t* xb_pair, __m512bh w0, __m512bh w1,
                                                   __m512 (&acc)[T][2]) {
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    const __m512bh xv = (__m512bh)_mm512_set1_epi32(int32_t(xb_pair[t * kTokenStride]));
    acc[t][0] = _mm512_dpbf16_ps(acc[t][0], w0, xv);
    acc[t][1] = _mm512_dpbf16_ps(acc[t][1], w1, xv);
  }
}

// Rows [row, row + 16) of panel block output for T tokens: partial sums in y (rows_valid of the
// 32 a block covers).
template <int T>
inline void LoadPartials(const float* y, int64_t ldy, int rows_valid, __m512 (&acc)[T][2]) {
  for (int t = 0; t < T; ++t) {
    if (rows_valid == 32) {
      acc[t][0] = _mm512_loadu_ps(y + t * ldy);
      acc[t][1] = _mm512_loadu_ps(y + t * ldy + 16);
    } else {
      const __mmask16 m0 = rows_valid >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << rows_valid) - 1);
      const __mmask16 m1 = rows_valid <= 16 ? __mmask16(0) : __mmask16((1u << (rows_valid - 16)) - 1);
      acc[t][0] = _mm512_maskz_loadu_ps(m0, y + t * ldy);
      acc[t][1] = _mm512_maskz_loadu_ps(m1, y + t * ldy + 16);
    }
  }
}

template <int T>
inline void StoreOutputs(const __m512 (&acc)[T][2], float* y, int64_t ldy, int rows_valid) {
  const __mmask16 m0 = rows_valid >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << rows_valid) - 1);
  const __mmask16 m1 = rows_valid >= 32 ? __mmask16(0xFFFF)
                       : rows_valid <= 16 ? __mmask16(0)
                                          : __mmask16((1u << (rows_valid - 16)) - 1);
  for (int t = 0; t < T; ++t) {
    _mm512_mask_storeu_ps(y + t * ldy, m0, acc[t][0]);
    _mm512_mask_storeu_ps(y + t * ldy + 16, m1, acc[t][1]);
  }
}

// The micro-kernel: y[T tokens][32 rows] (partial sums; zero when `first`) += the block's products
// over `pairs` column pairs in order. x: the tokens' activation pairs (token rows, PairLayout);
// p[v]: panel v's bytes at the block's first column (v = 1 may repeat v = 0 past the matrix: not
// stored). next[v]: the next block's bytes, fetched into L2 as the pairs go (nullptr: none).
// odd_tail: the last pair has no second column.
template <int T, int64_t kTokenStride>
inline void DotBlock(PairLayout<kTokenStride> x, const std::byte* const (&p)[2],
                     const std::byte* const (&next)[2], int64_t pairs, bool odd_tail, bool first, float* y,
                     int64_t ldy, int rows_valid) {
  __m512 acc[T][2];
  if (first) {
    for (int t = 0; t < T; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
  } else {
    LoadPartials<T>(y, ldy, rows_valid, acc);
  }
  const __m512i interleave = InterleaveIndex();
  const int64_t full_pairs = odd_tail ? pairs - 1 : pairs;
  for (int64_t j = 0; j < full_pairs; ++j) {
    __builtin_prefetch(p[0] + (j + 32) * kPanelPairBytes);
    __builtin_prefetch(p[1] + (j + 32) * kPanelPairBytes);
    if (next[0] != nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(next[0] + j * kPanelPairBytes), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(next[1] + j * kPanelPairBytes), _MM_HINT_T1);
    }
    DotPair<T, kTokenStride>(x.xb + j, LoadPanelPair(p[0] + j * kPanelPairBytes, interleave),
               LoadPanelPair(p[1] + j * kPanelPairBytes, interleave), acc);
  }
  if (odd_tail) {
    const int64_t j = pairs - 1;
    DotPair<T, kTokenStride>(x.xb + j, LoadPanelLastColumn(p[0] + j * kPanelPairBytes, interleave),
               LoadPanelLastColumn(p[1] + j * kPanelPairBytes, interleave), acc);
  }
  StoreOutputs<T>(acc, y, ldy, rows_valid);
}

template <int kMax, class Fn>
inline void WithTokens(int n, Fn&& fn) {
  if constexpr (kMax > 0) {
    if (n == kMax) return fn(std::integral_constant<int, kMax>{});
    WithTokens<kMax - 1>(n, fn);
  }
}

// Rows [row_begin, row_end) of y for `tokens` tokens over columns [c0, c0 + len): x holds their
// pairs, tile after tile (tile_stride uint32 apart). Blocks of rows outside, tiles inside: the
// block's weights (32 rows of the column block) stay in L1 while every tile passes.
template <int64_t kTokenStride>
void BlockProduct(PairLayout<kTokenStride> x, int64_t tile_stride, int64_t tokens, const WeightMatrix& w, int64_t c0,
                  int64_t len, int64_t row_begin, int64_t row_end, float* y, int64_t ldy) {
  const int64_t pairs = (len + 1) / 2;
  const bool odd_tail = len % 2 != 0;
  for (int64_t row0 = row_begin; row0 < row_end; row0 += 2 * kPanelRows) {
    const int64_t row1 = row0 + kPanelRows < row_end ? row0 + kPanelRows : row0;
    const std::byte* p[2] = {w.panel(row0 / kPanelRows) + c0 * kPanelRows * 2,
                             w.panel(row1 / kPanelRows) + c0 * kPanelRows * 2};
    const int rows_valid = int(std::min<int64_t>(2 * kPanelRows, row_end - row0));
    // The block after this one (the next 32 rows, else this range's first rows in the next
    // column block; none past the matrix), fetched into L2 while the first tile runs: the panel
    // streams' own prefetch runs into this block's next columns, which come later.
    const std::byte* next[2] = {nullptr, nullptr};
    int64_t next_row = row0 + 2 * kPanelRows, next_c0 = c0;
    if (next_row >= row_end) next_row = row_begin, next_c0 = c0 + kGemmColumns;
    if (next_c0 < w.cols) {
      const int64_t next_row1 = next_row + kPanelRows < row_end ? next_row + kPanelRows : next_row;
      next[0] = w.panel(next_row / kPanelRows) + next_c0 * kPanelRows * 2;
      next[1] = w.panel(next_row1 / kPanelRows) + next_c0 * kPanelRows * 2;
    }
    static const std::byte* const kNone[2] = {nullptr, nullptr};
    for (int64_t t = 0; t < tokens; t += kTile) {
      const PairLayout<kTokenStride> xt{x.xb + (t / kTile) * tile_stride};
      WithTokens<kTile>(int(std::min<int64_t>(kTile, tokens - t)), [&](auto count) {
        DotBlock<decltype(count)::value>(xt, p, t == 0 ? next : kNone, pairs, odd_tail, c0 == 0, y + t * ldy + row0,
                                         ldy, rows_valid);
      });
    }
  }
}

// Packed activations (kernels.h Bf16PackedActivationFloats): the fp32 layout's blocks and tiles
// at half the size, a tile of a column block holding kTile token rows of kPairsPerBlock pairs
// (uint32), so that packing is a row conversion (ConvertRows) with whole-vector stores.
int64_t PackedTileIndex(int64_t n, int64_t tile, int64_t c0) {
  return (c0 / kGemmColumns * GemmTiles(n) + tile) * kPairsPerBlock * kTile;
}
// (The buffer is float storage (Workspace) that only this file reads and writes, always as uint32:
// between pack_activations and the product no code touches it as float.)
uint32_t* PackedTile(float* xp, int64_t n, int64_t tile, int64_t c0) {
  return reinterpret_cast<uint32_t*>(xp) + PackedTileIndex(n, tile, c0);
}
const uint32_t* PackedTile(const float* xp, int64_t n, int64_t tile, int64_t c0) {
  return reinterpret_cast<const uint32_t*>(xp) + PackedTileIndex(n, tile, c0);
}

void PackBf16(const float* x, int64_t n, int64_t cols, int64_t tile_begin, int64_t tile_end, float* xp) {
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int64_t t0 = tile * kGemmTileTokens;
    const int tokens = int(std::min<int64_t>(kGemmTileTokens, n - t0));
    for (int64_t c0 = 0; c0 < cols; c0 += kGemmColumns) {
      ConvertRows(x + t0 * cols + c0, cols, tokens, std::min(kGemmColumns, cols - c0), PackedTile(xp, n, tile, c0),
                  kPairsPerBlock);
    }
  }
}

void MatMulPanelsPackedBf16(const float* xp, int64_t n, const WeightMatrix& w, int64_t panel_begin, int64_t panel_end,
                            float* y, int64_t ldy) {
  const int64_t row_end = std::min(w.rows, panel_end * kPanelRows);
  for (int64_t c0 = 0; c0 < w.cols; c0 += kGemmColumns) {
    // A column block's tiles follow each other in xp.
    BlockProduct(PairLayout<kPairsPerBlock>{PackedTile(xp, n, 0, c0)}, kPairsPerBlock * kTile, n, w, c0,
                 std::min(kGemmColumns, w.cols - c0), panel_begin * kPanelRows, row_end, y, ldy);
  }
}

// The in-register product: groups of kGroupTokens tokens; for each, blocks of columns converted
// (ConvertRows: whole vectors, cheap beside the products even when a call covers only two panels,
// as MatMul's chunks do) and multiplied with the range's panels. (A block's width changes no
// result: partial sums are stored and reloaded exactly.)
constexpr int64_t kStackPairs = 16384;  // 64 KB

// One group of at most kMaxTokens tokens, in blocks of kBlockPairs pairs (the rows' stride).
template <int64_t kBlockPairs, int64_t kMaxTokens>
void GroupProduct(const float* x, int64_t group, const WeightMatrix& w, int64_t row_begin, int64_t row_end, float* y,
                  int64_t ldy) {
  static_assert(kBlockPairs * kMaxTokens <= kStackPairs);
  alignas(64) uint32_t xb[kStackPairs];  // [token][pair in block]
  for (int64_t c0 = 0; c0 < w.cols; c0 += 2 * kBlockPairs) {
    const int64_t len = std::min(2 * kBlockPairs, w.cols - c0);
    ConvertRows(x + c0, w.cols, int(group), len, xb, kBlockPairs);
    BlockProduct(PairLayout<kBlockPairs>{xb}, kTile * kBlockPairs, group, w, c0, len, row_begin, row_end, y, ldy);
  }
}

void MatMulPanelsBf16(const float* x, int64_t n, const WeightMatrix& w, int64_t panel_begin, int64_t panel_end,
                      float* y, int64_t ldy) {
  const int64_t row_end = std::min(w.rows, panel_end * kPanelRows);
  for (int64_t g0 = 0; g0 < n; g0 += kGroupTokens) {
    const int64_t group = std::min(kGroupTokens, n - g0);
    // One tile reads each weight once: wide blocks, so that the panels stream. More tiles re-read
    // each block's weights per tile: kGemmColumns, so that they stay in L1.
    if (group <= kTile) {
      GroupProduct<1024, kTile>(x + g0 * w.cols, group, w, panel_begin * kPanelRows, row_end,
                                                      y + g0 * ldy, ldy);
    } else {
      GroupProduct<kPairsPerBlock, kGroupTokens>(x + g0 * w.cols, group, w, panel_begin * kPanelRows, row_end, y + g0 * ldy, ldy);
    }
  }
}

// ---- Row-major BF16 weights (kv_b_proj's slices, read by rows) ------------------------------
// Adjacent columns of a row are already the pairs vdpbf16ps multiplies: each (token, row) dot
// product accumulates 16 lanes over 32-column chunks in order, reduced in a fixed order at the end,
// so it does not depend on the block it was computed in (batch-invariant).

bool IsBf16Rows(const WeightMatrix& w) {
  return !w.packed && w.format == WeightFormat::kDense && w.dtype == DType::kBF16;
}

// T tokens (activation pairs in rows of xb, `pairs` apart) x R rows of w.
template <int T, int R>
__attribute__((always_inline)) inline void RowsBlock(const uint32_t* xb, int64_t pairs, const WeightMatrix& w,
                                                     int64_t row0, float* y, int64_t ldy) {
  // (Every loop over T and R unrolled: GCC otherwise keeps the arrays in memory.)
  __m512 acc[T][R];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[t][r] = _mm512_setzero_ps();
  }
  const std::byte* rows[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) rows[r] = w.row(row0 + r);
  const int64_t cols = w.cols;
  for (int64_t c = 0; c < cols; c += 32) {
    const __mmask32 m = cols - c >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1ull << (cols - c)) - 1);
    __m512bh wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(m, rows[r] + 2 * c);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(m, xb + t * pairs + c / 2);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[t][r] = _mm512_dpbf16_ps(acc[t][r], wv[r], xv);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) y[t * ldy + row0 + r] = _mm512_reduce_add_ps(acc[t][r]);
  }
}

template <int R>
void RowsForTokens(const uint32_t* xb, int64_t pairs, int64_t tokens, const WeightMatrix& w, int64_t row0, float* y,
                   int64_t ldy) {
  int64_t t = 0;
  for (; t + 4 <= tokens; t += 4) RowsBlock<4, R>(xb + t * pairs, pairs, w, row0, y + t * ldy, ldy);
  for (; t < tokens; ++t) RowsBlock<1, R>(xb + t * pairs, pairs, w, row0, y + t * ldy, ldy);
}

void MatMulRowsBf16(const float* x, int64_t n, const WeightMatrix& w, int64_t row_begin, int64_t row_end, float* y,
                    int64_t ldy) {
  alignas(64) uint32_t xb[kStackPairs];  // [token][pair]
  const int64_t pairs = (w.cols + 1) / 2;
  // Tokens whose converted rows fit the buffer (at least one row: wider matrices go to fp32).
  const int64_t group_max = kStackPairs / pairs;
  for (int64_t g0 = 0; g0 < n; g0 += group_max) {
    const int64_t group = std::min(group_max, n - g0);
    ConvertRows(x + g0 * w.cols, w.cols, int(group), w.cols, xb, pairs);
    int64_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) RowsForTokens<4>(xb, pairs, group, w, r, y + g0 * ldy, ldy);
    for (; r < row_end; ++r) RowsForTokens<1>(xb, pairs, group, w, r, y + g0 * ldy, ldy);
  }
}

// Row-major fp8-block rows (kv_b_proj slices of an fp8 checkpoint whose bands span heads' rows:
// model/absorbed_weights.h): within one band of block_rows
// rows every row shares the scale of each column group, so the scale is folded into the
// activations, x * scale rounded to bf16 once per (token, band), and the rows' codes, exact in
// bf16, are widened 16 rows at a time into a bf16 row-major block that RowsBlock multiplies as
// above. Each (token, row) output is then the dense rows' sum, whatever the batch.
constexpr int64_t kQuantRowsChunk = 16;
constexpr int64_t kQuantRowsMaxCols = 2048;  // a chunk's widened rows: 64 KB on the stack

bool IsFp8Rows(const WeightMatrix& w) {
  return !w.packed && w.format == WeightFormat::kFp8Block && w.cols <= kQuantRowsMaxCols && w.block_rows > 0;
}

// Rows [r0, r0 + count) of w as bf16 code value / 256 (E4M3 read as fp16, the AVX-512 table's
// LoadFp8), [count][cols].
void WidenFp8Rows(const WeightMatrix& w, int64_t r0, int64_t count, uint16_t* dst) {
  for (int64_t r = 0; r < count; ++r) {
    const std::byte* row = w.row(r0 + r);
    for (int64_t c = 0; c < w.cols; c += 32) {
      const __mmask32 m = w.cols - c >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1ull << (w.cols - c)) - 1);
      const __m512i h = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, row + c));
      const __m512i f16 = _mm512_and_si512(_mm512_slli_epi16(h, 7), _mm512_set1_epi16(int16_t(0xBFFF)));
      const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(f16));
      const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(f16, 1));
      _mm512_mask_storeu_epi16(dst + r * w.cols + c, m, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
}

void MatMulRowsFp8(const float* x, int64_t n, const WeightMatrix& w, int64_t row_begin, int64_t row_end, float* y,
                   int64_t ldy) {
  alignas(64) uint32_t xb[kStackPairs];                          // [token][pair]
  alignas(64) uint16_t rows[kQuantRowsChunk * kQuantRowsMaxCols];  // [row in chunk][column]
  alignas(64) float column_scale[kQuantRowsMaxCols];             // the band's scale x 256, per column
  alignas(64) float scaled[kQuantRowsMaxCols];                   // one token's x * column_scale
  const int64_t cols = w.cols, pairs = (cols + 1) / 2;
  const int64_t group_max = kStackPairs / pairs;
  for (int64_t band_begin = row_begin; band_begin < row_end;) {
    const int64_t band = (w.scale_row0 + band_begin) / w.block_rows;
    const int64_t band_end = std::min(row_end, (band + 1) * w.block_rows - w.scale_row0);
    for (int64_t c = 0; c < cols; ++c) {
      column_scale[c] = LoadF32Unaligned(w.scales, size_t(band * w.scale_cols() + c / w.block_cols)) * 256.0f;
    }
    for (int64_t g0 = 0; g0 < n; g0 += group_max) {
      const int64_t group = std::min(group_max, n - g0);
      for (int64_t t = 0; t < group; ++t) {
        const float* xt = x + (g0 + t) * cols;
        for (int64_t c = 0; c < cols; ++c) scaled[c] = xt[c] * column_scale[c];
        ConvertRows(scaled, cols, 1, cols, xb + t * pairs, pairs);
      }
      for (int64_t r0 = band_begin; r0 < band_end; r0 += kQuantRowsChunk) {
        const int64_t count = std::min(kQuantRowsChunk, band_end - r0);
        WidenFp8Rows(w, r0, count, rows);
        const WeightMatrix chunk{DType::kBF16, count, cols, rows};
        float* yc = y + g0 * ldy + r0;
        int64_t r = 0;
        for (; r + 4 <= count; r += 4) RowsForTokens<4>(xb, pairs, group, chunk, r, yc, ldy);
        for (; r < count; ++r) RowsForTokens<1>(xb, pairs, group, chunk, r, yc, ldy);
      }
    }
    band_begin = band_end;
  }
}

// ---- Quantized panels (fp8-block, int4-g32) --------------------------------------------------
// Every code is exact in bf16 (E4M3 values, like fp16's, have at most 4 significant bits and
// exponents bf16 holds; int4 codes are -8..7), so a weight block is widened once into bf16 column
// pairs laid out as vdpbf16ps reads them, and the scale multiplies each group's partial sums in
// fp32: each output is the sum over its column groups, in order, of scale * (sum over the group's
// pairs, in order, of x[2j] * code[2j] + x[2j+1] * code[2j+1]), a group cut where a column block
// (kGemmColumns, the same for every n) ends. No scale is rounded, and a token's result does not
// depend on its batch. Tiles of 6 tokens x 32 rows: 12 partial and 12 running sums in registers.

constexpr int kQuantTile = 6;
constexpr int64_t kMaxGroupsPerBlock = kPairsPerBlock + 1;

// One block of 32 rows x a column block, widened: the pairs as vdpbf16ps multiplies them and each
// group's scales.
struct QuantWidened {
  alignas(64) uint32_t pairs[kPairsPerBlock][2][kPanelRows];  // [pair][vector][lane]: (even, odd) bf16
  alignas(64) float scales[kMaxGroupsPerBlock][2][kPanelRows];  // [group][vector][lane]
  int64_t group_end[kMaxGroupsPerBlock];                       // pair index one past each group
  int64_t groups = 0;
};

// E4M3 codes, 32 at p (16 at p when `half`: the second column reads as zero), as bf16 (exactly:
// a normal code's exponent field rebiased from 7 to 127 and its 3 mantissa bits moved up; a
// subnormal's m x 2^-9 from a table), then interleaved: (column c, column c + 1) per lane. Integer
// operations only: on the decode path the conversion, not memory, is what one token waits for.
inline __m512i Fp8SubnormalTable() {
  // Words 0-7: bf16(m * 2^-9), m = 0..7 (indexes 8-31 are never used).
  return (__m512i)_mm512_cvtne2ps_pbh(
      _mm512_setzero_ps(), _mm512_setr_ps(0, 1.0f / 512, 2.0f / 512, 3.0f / 512, 4.0f / 512, 5.0f / 512, 6.0f / 512,
                                          7.0f / 512, 0, 0, 0, 0, 0, 0, 0, 0));
}
inline __m512i WidenFp8Pair(const std::byte* p, bool half, __m512i interleave, __m512i subnormals) {
  const __m256i bytes = half ? _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))
                             : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m512i w = _mm512_cvtepu8_epi16(bytes);
  // |code| << 4 with the exponent rebiased: (e + 120) << 7 | m << 4.
  __m512i magnitude = _mm512_add_epi16(_mm512_slli_epi16(_mm512_and_si512(w, _mm512_set1_epi16(0x7F)), 4),
                                       _mm512_set1_epi16(0x3C00));
  // Exponent field zero: m x 2^-9 (vpermw reads the index's low 5 bits: m, as bits 3-4 are zero).
  const __mmask32 subnormal = _mm512_testn_epi16_mask(w, _mm512_set1_epi16(0x78));
  magnitude = _mm512_mask_permutexvar_epi16(magnitude, subnormal, w, subnormals);
  // The sign: bit 7 of the code to bit 15 (0xF8: a | (b & c), a = magnitude, b = w << 8, c = 0x8000).
  const __m512i bf16 = _mm512_ternarylogic_epi32(magnitude, _mm512_slli_epi16(w, 8), _mm512_set1_epi16(int16_t(0x8000)), 0xF8);
  return _mm512_permutexvar_epi16(interleave, bf16);
}

// 16 bytes of int4 nibbles (lane k: column c low, c + 1 high) as (c, c + 1) bf16 pairs of code - 8.
inline __m512i WidenInt4Pair(const std::byte* p, __m512i table) {
  const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i idx = _mm512_or_si512(_mm512_and_si512(d, _mm512_set1_epi32(0x0F)),
                                      _mm512_slli_epi32(_mm512_and_si512(d, _mm512_set1_epi32(0xF0)), 12));
  return _mm512_permutexvar_epi16(idx, table);  // words 0-15 of table: bf16(-8 .. 7)
}

// The scales of fp8 rows [row, row + 16) (clamped to the matrix) in column group g.
void Fp8Scales(const WeightMatrix& w, int64_t row, int64_t g, float* out) {
  const auto scale_of_band = [&](int64_t band) {
    return LoadF32Unaligned(w.scales, size_t(band * w.scale_cols() + g));
  };
  const int64_t last = std::min(row + kPanelRows, w.rows) - 1;
  if (row / w.block_rows == last / w.block_rows) {  // one band (block_rows a multiple of 16)
    _mm512_store_ps(out, _mm512_set1_ps(scale_of_band(row / w.block_rows)));
    return;
  }
  for (int i = 0; i < kPanelRows; ++i) out[i] = scale_of_band(std::min(row + i, last) / w.block_rows);
}

// Rows row0 .. row0 + 31 (vector 1 repeats vector 0 past row_end: not stored), columns [c0, c0 +
// len) of w into q.
void WidenQuant(const WeightMatrix& w, int64_t row0, int64_t row_end, int64_t c0, int64_t len, QuantWidened& q) {
  const int64_t pairs = (len + 1) / 2;
  const int64_t first_row[2] = {row0, row0 + kPanelRows < row_end ? row0 + kPanelRows : row0};
  // Groups: cut at multiples of block_cols (even, so at pair boundaries) and at the block's end.
  q.groups = 0;
  for (int64_t c = c0; c < c0 + len;) {
    const int64_t end = std::min(c0 + len, (c / w.block_cols + 1) * w.block_cols);
    q.group_end[q.groups++] = (end - c0 + 1) / 2;
    c = end;
  }
  const bool fp8 = w.format == WeightFormat::kFp8Block;
  const __m512i interleave = InterleaveIndex(), subnormals = Fp8SubnormalTable();
  const __m512i int4_table =
      (__m512i)_mm512_cvtne2ps_pbh(_mm512_setzero_ps(), _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3,
                                                                         4, 5, 6, 7));
  for (int v = 0; v < 2; ++v) {
    const std::byte* p = w.panel(first_row[v] / kPanelRows);
    if (fp8) {
      // Whole pairs, then an odd-width matrix's last column on its own.
      const int64_t full = c0 + len == w.cols && w.cols % 2 != 0 ? pairs - 1 : pairs;
      for (int64_t j = 0; j < full; ++j) {
        _mm512_store_si512(q.pairs[j][v], WidenFp8Pair(p + (c0 + 2 * j) * kPanelRows, false, interleave, subnormals));
      }
      if (full < pairs) {
        _mm512_store_si512(q.pairs[full][v], WidenFp8Pair(p + (c0 + 2 * full) * kPanelRows, true, interleave, subnormals));
      }
    } else {
      for (int64_t j = 0; j < pairs; ++j) {
        _mm512_store_si512(q.pairs[j][v], WidenInt4Pair(p + (c0 / 2 + j) * kPanelRows, int4_table));
      }
    }
    for (int64_t g = 0, c = c0; g < q.groups; c = c0 + 2 * q.group_end[g], ++g) {
      const int64_t column_group = c / w.block_cols;
      if (fp8) {
        Fp8Scales(w, first_row[v], column_group, q.scales[g][v]);
      } else {
        // BF16 [panel][scale_cols][16].
        const auto* s = static_cast<const std::byte*>(w.scales) +
                        size_t(((first_row[v] / kPanelRows) * w.scale_cols() + column_group) * kPanelRows) * 2;
        const __m512i words = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
        _mm512_store_ps(q.scales[g][v], _mm512_castsi512_ps(_mm512_slli_epi32(words, 16)));
      }
    }
  }
}

// The codes WidenQuant reads for a block of 32 rows x a column block: two runs of `bytes`, one
// per vector (nullptr: none). Fetched into L2 while the block before is multiplied, one cache
// line per column pair of the first token tile, so that widening does not wait on memory.
struct NextCodes {
  const std::byte* run[2] = {nullptr, nullptr};
  int64_t bytes = 0;
};

NextCodes CodesOf(const WeightMatrix& w, int64_t row0, int64_t row_end, int64_t c0, int64_t len) {
  NextCodes next;
  const int64_t row1 = row0 + kPanelRows < row_end ? row0 + kPanelRows : row0;
  const int64_t offset = w.format == WeightFormat::kFp8Block ? c0 * kPanelRows : c0 / 2 * kPanelRows;
  next.run[0] = w.panel(row0 / kPanelRows) + offset;
  next.run[1] = w.panel(row1 / kPanelRows) + offset;
  next.bytes = w.format == WeightFormat::kFp8Block ? len * kPanelRows : len / 2 * kPanelRows;
  return next;
}

// y[T tokens][32 rows] (partial sums; zero when `first`) += the widened block's products.
template <int T, int64_t kTokenStride>
inline void QuantDotBlock(PairLayout<kTokenStride> x, const QuantWidened& q, const NextCodes& next,
                          bool first, float* y, int64_t ldy, int rows_valid) {
  __m512 acc[T][2];
  if (first) {
    for (int t = 0; t < T; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
  } else {
    LoadPartials<T>(y, ldy, rows_valid, acc);
  }
  for (int64_t g = 0, j = 0; g < q.groups; ++g) {
    __m512 part[T][2];
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) part[t][0] = part[t][1] = _mm512_setzero_ps();
    for (; j < q.group_end[g]; ++j) {
      if (next.run[0] != nullptr && j * 64 < next.bytes) {
        _mm_prefetch(reinterpret_cast<const char*>(next.run[0] + j * 64), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(next.run[1] + j * 64), _MM_HINT_T1);
      }
      DotPair<T, kTokenStride>(x.xb + j, (__m512bh)_mm512_load_si512(q.pairs[j][0]),
                               (__m512bh)_mm512_load_si512(q.pairs[j][1]), part);
    }
    const __m512 s0 = _mm512_load_ps(q.scales[g][0]), s1 = _mm512_load_ps(q.scales[g][1]);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      acc[t][0] = _mm512_fmadd_ps(part[t][0], s0, acc[t][0]);
      acc[t][1] = _mm512_fmadd_ps(part[t][1], s1, acc[t][1]);
    }
  }
  StoreOutputs<T>(acc, y, ldy, rows_valid);
}

// The same products for a few tokens (at most kDirectTokens), the codes converted in registers
// pair by pair instead of widened into a block first (which a few tokens cannot repay): the same
// pairs, groups and order, so the same results bit for bit. 6 (4 x 6 accumulators: 24 of the 32
// registers): fp8 weights streamed to 6 tokens at 31 GB/s instead of 22 through the widened
// block (docs/benchmarks.md); a routed expert gets ~6 tokens at 64 requests.
constexpr int kDirectTokens = 6;

template <int T, int64_t kTokenStride>
void QuantDotDirect(PairLayout<kTokenStride> x, const WeightMatrix& w, int64_t row0, int64_t row_end,
                    int64_t c0, int64_t len, float* y, int64_t ldy) {
  const int64_t first_row[2] = {row0, row0 + kPanelRows < row_end ? row0 + kPanelRows : row0};
  const int rows_valid = int(std::min<int64_t>(2 * kPanelRows, row_end - row0));
  const bool fp8 = w.format == WeightFormat::kFp8Block;
  const std::byte* p[2] = {w.panel(first_row[0] / kPanelRows), w.panel(first_row[1] / kPanelRows)};
  const __m512i interleave = InterleaveIndex(), subnormals = Fp8SubnormalTable();
  const __m512i int4_table =
      (__m512i)_mm512_cvtne2ps_pbh(_mm512_setzero_ps(), _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3,
                                                                         4, 5, 6, 7));
  __m512 acc[T][2];
  if (c0 == 0) {
    for (int t = 0; t < T; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
  } else {
    LoadPartials<T>(y, ldy, rows_valid, acc);
  }
  for (int64_t c = c0; c < c0 + len;) {
    const int64_t end = std::min(c0 + len, (c / w.block_cols + 1) * w.block_cols);
    alignas(64) float scales[2][kPanelRows];
    for (int v = 0; v < 2; ++v) {
      if (fp8) {
        Fp8Scales(w, first_row[v], c / w.block_cols, scales[v]);
      } else {
        const auto* sp = static_cast<const std::byte*>(w.scales) +
                         size_t(((first_row[v] / kPanelRows) * w.scale_cols() + c / w.block_cols) * kPanelRows) * 2;
        const __m512i words = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sp)));
        _mm512_store_ps(scales[v], _mm512_castsi512_ps(_mm512_slli_epi32(words, 16)));
      }
    }
    __m512 part[T][2];
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) part[t][0] = part[t][1] = _mm512_setzero_ps();
    const uint32_t* xg = x.xb + (c - c0) / 2;
    // (Each format a loop of its own, the last pair of an odd-width fp8 matrix after it: one
    // generic loop kept the pairs in memory and ran at half speed.)
    if (fp8) {
      const int64_t full_end = end == w.cols && w.cols % 2 != 0 ? end - 1 : end;
      const std::byte* a = p[0] + c * kPanelRows;
      const std::byte* b = p[1] + c * kPanelRows;
      for (; c < full_end; c += 2, a += 2 * kPanelRows, b += 2 * kPanelRows, ++xg) {
        _mm_prefetch(reinterpret_cast<const char*>(a + 2048), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b + 2048), _MM_HINT_T0);
        DotPair<T, kTokenStride>(xg, (__m512bh)WidenFp8Pair(a, false, interleave, subnormals),
                                 (__m512bh)WidenFp8Pair(b, false, interleave, subnormals), part);
      }
      if (c < end) {  // the last column, without its pair
        DotPair<T, kTokenStride>(xg, (__m512bh)WidenFp8Pair(a, true, interleave, subnormals),
                                 (__m512bh)WidenFp8Pair(b, true, interleave, subnormals), part);
        c = end;
      }
    } else {
      const std::byte* a = p[0] + (c / 2) * kPanelRows;
      const std::byte* b = p[1] + (c / 2) * kPanelRows;
      for (; c < end; c += 2, a += kPanelRows, b += kPanelRows, ++xg) {
        if ((c & 7) == 0) {
          _mm_prefetch(reinterpret_cast<const char*>(a + 2048), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(b + 2048), _MM_HINT_T0);
        }
        DotPair<T, kTokenStride>(xg, (__m512bh)WidenInt4Pair(a, int4_table), (__m512bh)WidenInt4Pair(b, int4_table),
                                 part);
      }
    }
    const __m512 s0 = _mm512_load_ps(scales[0]), s1 = _mm512_load_ps(scales[1]);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      acc[t][0] = _mm512_fmadd_ps(part[t][0], s0, acc[t][0]);
      acc[t][1] = _mm512_fmadd_ps(part[t][1], s1, acc[t][1]);
    }
  }
  StoreOutputs<T>(acc, y, ldy, rows_valid);
}

// Rows [row_begin, row_end) of y for `tokens` tokens over columns [c0, c0 + len) (within one
// column block): x holds their pairs, tile after tile (tile_stride uint32 apart, kTile tokens a
// tile). Each block of 32 rows is widened once, then every token passes.
template <int64_t kTokenStride>
void QuantBlockProduct(PairLayout<kTokenStride> x, int64_t tile_stride, int64_t tokens,
                       const WeightMatrix& w, int64_t c0, int64_t len, int64_t row_begin, int64_t row_end, float* y,
                       int64_t ldy, QuantWidened& q) {
  if (tokens <= kDirectTokens) {
    for (int64_t row0 = row_begin; row0 < row_end; row0 += 2 * kPanelRows) {
      WithTokens<kDirectTokens>(int(tokens), [&](auto count) {
        QuantDotDirect<decltype(count)::value>(x, w, row0, row_end, c0, len, y + row0, ldy);
      });
    }
    return;
  }
  for (int64_t row0 = row_begin; row0 < row_end; row0 += 2 * kPanelRows) {
    WidenQuant(w, row0, row_end, c0, len, q);
    const int rows_valid = int(std::min<int64_t>(2 * kPanelRows, row_end - row0));
    // The next block: the next 32 rows, else the first rows of the next column block.
    NextCodes next;
    if (row0 + 2 * kPanelRows < row_end) {
      next = CodesOf(w, row0 + 2 * kPanelRows, row_end, c0, len);
    } else if (c0 + kGemmColumns < w.cols) {
      next = CodesOf(w, row_begin, row_end, c0 + kGemmColumns, std::min(kGemmColumns, w.cols - c0 - kGemmColumns));
    }
    for (int64_t t = 0; t < tokens; t += kQuantTile) {
      const PairLayout<kTokenStride> xt{x.xb + (t / kTile) * tile_stride + (t % kTile) * kTokenStride};
      WithTokens<kQuantTile>(int(std::min<int64_t>(kQuantTile, tokens - t)), [&](auto count) {
        QuantDotBlock<decltype(count)::value>(xt, q, t == 0 ? next : NextCodes{}, c0 == 0, y + t * ldy + row0, ldy,
                                              rows_valid);
      });
    }
  }
}

void MatMulQuantPacked(const float* xp, int64_t n, const WeightMatrix& w, int64_t panel_begin, int64_t panel_end,
                       float* y, int64_t ldy) {
  static_assert(kTile % kQuantTile == 0);
  QuantWidened q;
  const int64_t row_end = std::min(w.rows, panel_end * kPanelRows);
  for (int64_t c0 = 0; c0 < w.cols; c0 += kGemmColumns) {
    QuantBlockProduct(PairLayout<kPairsPerBlock>{PackedTile(xp, n, 0, c0)}, kPairsPerBlock * kTile, n, w, c0,
                      std::min(kGemmColumns, w.cols - c0), panel_begin * kPanelRows, row_end, y, ldy, q);
  }
}

// The in-register product: groups of kGroupTokens tokens, each column block converted into rows.
// One token (decode): its row converted once, then each block of 32 rows across every column
// block in turn, so that each panel is read as one sequential stream (column blocks outermost read
// it in pieces of a block's width, ~3x slower for one token). The same sums as QuantBlockProduct's:
// the partial sums are stored and reloaded at each column block either way.
void MatMulQuantOneToken(const float* x, const WeightMatrix& w, int64_t row_begin, int64_t row_end, float* y) {
  alignas(64) uint32_t xb[kStackPairs];  // [pair]
  ConvertRows(x, w.cols, 1, w.cols, xb, (w.cols + 1) / 2);
  for (int64_t row0 = row_begin; row0 < row_end; row0 += 2 * kPanelRows) {
    for (int64_t c0 = 0; c0 < w.cols; c0 += kGemmColumns) {
      QuantDotDirect<1>(PairLayout<kPairsPerBlock>{xb + c0 / 2}, w, row0, row_end, c0,
                        std::min(kGemmColumns, w.cols - c0), y + row0, 0);
    }
  }
}

void MatMulQuant(const float* x, int64_t n, const WeightMatrix& w, int64_t panel_begin, int64_t panel_end, float* y,
                 int64_t ldy) {
  static_assert(kPairsPerBlock * kGroupTokens <= kStackPairs);
  if (n == 1 && (w.cols + 1) / 2 <= kStackPairs) {
    return MatMulQuantOneToken(x, w, panel_begin * kPanelRows, std::min(w.rows, panel_end * kPanelRows), y);
  }
  QuantWidened q;
  alignas(64) uint32_t xb[kPairsPerBlock * kGroupTokens];  // [token][pair in block]
  const int64_t row_end = std::min(w.rows, panel_end * kPanelRows);
  for (int64_t g0 = 0; g0 < n; g0 += kGroupTokens) {
    const int64_t group = std::min(kGroupTokens, n - g0);
    for (int64_t c0 = 0; c0 < w.cols; c0 += kGemmColumns) {
      const int64_t len = std::min(kGemmColumns, w.cols - c0);
      ConvertRows(x + g0 * w.cols + c0, w.cols, int(group), len, xb, kPairsPerBlock);
      QuantBlockProduct(PairLayout<kPairsPerBlock>{xb}, kTile * kPairsPerBlock, group, w, c0, len,
                        panel_begin * kPanelRows, row_end, y + g0 * ldy, ldy, q);
    }
  }
}

// The table with bf16 products from kMinTokens tokens (fp8-block and int4-g32 codes from
// kCodesMinTokens: kernels.h Bf16CodesMinTokens); the AVX-512 table's entries otherwise.
template <int kMinTokens>
struct Bf16From {
  static constexpr int kCodesMinTokens = Bf16CodesMinTokens(kMinTokens);
  static const KernelSet& Base() { return *Avx512Kernels(); }
  static bool Uses(int64_t n, const WeightMatrix& w) {
    return n >= (w.quantized() ? kCodesMinTokens : kMinTokens) && Bf16DotMultiplies(w);
  }

  static void MatMulRows(const float* x, int64_t n, const WeightMatrix& w, int64_t row_begin, int64_t row_end,
                         float* y, int64_t ldy) {
    if (n >= kCodesMinTokens && IsFp8Rows(w)) return MatMulRowsFp8(x, n, w, row_begin, row_end, y, ldy);
    if (n < kMinTokens || !IsBf16Rows(w) || (w.cols + 1) / 2 > kStackPairs) {
      return Base().matmul_rows(x, n, w, row_begin, row_end, y, ldy);
    }
    MatMulRowsBf16(x, n, w, row_begin, row_end, y, ldy);
  }
  static void MatMulPanels(const float* x, int64_t n, const WeightMatrix& w, int64_t panel_begin, int64_t panel_end,
                           float* y, int64_t ldy) {
    if (!Uses(n, w)) return Base().matmul_panels(x, n, w, panel_begin, panel_end, y, ldy);
    if (w.quantized()) return MatMulQuant(x, n, w, panel_begin, panel_end, y, ldy);
    MatMulPanelsBf16(x, n, w, panel_begin, panel_end, y, ldy);
  }
  static void PackActivations(const float* x, int64_t n, const WeightMatrix& w, int64_t tile_begin, int64_t tile_end,
                              float* xp) {
    if (!Uses(n, w)) return Base().pack_activations(x, n, w, tile_begin, tile_end, xp);
    PackBf16(x, n, w.cols, tile_begin, tile_end, xp);
  }
  static void MatMulPanelsPacked(const float* x, const float* xp, float* scratch, int64_t n, const WeightMatrix& w,
                                 int64_t panel_begin, int64_t panel_end, float* y, int64_t ldy) {
    if (!Uses(n, w)) return Base().matmul_panels_packed(x, xp, scratch, n, w, panel_begin, panel_end, y, ldy);
    if (w.quantized()) return MatMulQuantPacked(xp, n, w, panel_begin, panel_end, y, ldy);
    MatMulPanelsPackedBf16(xp, n, w, panel_begin, panel_end, y, ldy);
  }

  static KernelSet Make(const char* name) {
    KernelSet k = Base();
    k.name = name;
    k.bf16_min_tokens = kMinTokens;
    // Two tiles or more: measured faster packed (bench-kernels' kernel choice, 32 tokens).
    k.bf16_packed_min_tokens = std::max<int64_t>(kMinTokens, kGemmTileTokens + 1);
    k.matmul_rows = MatMulRows;
    k.matmul_panels = MatMulPanels;
    k.pack_activations = PackActivations;
    k.matmul_panels_packed = MatMulPanelsPacked;
    k.latent_pack_query = LatentPackQuery;
    k.latent_scores = LatentScores;
    k.latent_sum = LatentSum;
    k.pack_f32_panels = PackF32PanelsBf16;
    return k;
  }
};

}  // namespace
}  // namespace avx512bf16

const KernelSet* Avx512Bf16Kernels(int min_tokens) {
  using namespace avx512bf16;
  static const KernelSet k1 = Bf16From<1>::Make("avx512-bf16");
  static const KernelSet k2 = Bf16From<2>::Make("avx512-bf16:2");
  static const KernelSet k17 = Bf16From<17>::Make("avx512-bf16:17");
  static const KernelSet k65 = Bf16From<65>::Make("avx512-bf16:65");
  switch (min_tokens) {
    case 1: return &k1;
    case 2: return &k2;
    case 17: return &k17;
    case 65: return &k65;
    default: return nullptr;
  }
}

}  // namespace mlaserve
