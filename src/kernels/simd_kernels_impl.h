// The SIMD kernel bodies, written once over a vector-traits type V and instantiated by each
// instruction-set file (kernels_avx2.cc, kernels_avx512.cc), which is compiled with that ISA's
// flags. Include only from those files.
//
// Every function here lives in the namespace MLASERVE_SIMD_NS that the including file defines, so
// that no inline function compiled with AVX-512 flags can be merged by the linker into a path
// that runs on a CPU without it.
//
// V provides: kLanes; type Reg; Zero(); LoadF32(const float*); LoadW<DType>(const std::byte*)
// (kLanes weights -> fp32); LoadFp8(p) (kLanes E4M3 codes -> value / 256); LoadInt4(p) (kLanes
// nibbles, lane 2j low in byte j -> nibble - 8); LoadInt8(p) (kLanes int8 codes -> fp32);
// LoadBytePair<kSigned>(p, high, even, odd) (kLanes 32-bit words of four byte codes -> bytes 0 and
// 1, or 2 and 3 when high, as fp32, sign- or zero-extended); LoadUint4(p) (kLanes nibbles, lane 2j low in byte j -> 0 .. 15);
// LoadUint4Pair(p, high_bytes, high_nibbles, even, odd) (kLanes words of eight nibbles -> the
// low or high nibbles of bytes 0 and 1, or 2 and 3, as fp32); LoadUint8(p) (as LoadInt8,
// zero-extended); LoadFp8Columns(p, first, second) (two fp8
// panel columns, codes at p and p + 16); LoadInt4Columns(p, low, high) (kLanes bytes of a paired
// int4 panel -> its two columns, each nibble - 8); Mul; Fma(a, b, acc) = a*b+acc; Sum(Reg);
// StoreF32(float*, Reg). kPanelTokens: tokens a panel tile keeps in registers.

#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/float16.h"
#include "kernels/kernels.h"
#include "kernels/weight_value.h"

#ifndef MLASERVE_SIMD_NS
#error "define MLASERVE_SIMD_NS before including simd_kernels_impl.h"
#endif

namespace mlaserve::MLASERVE_SIMD_NS {

// Calls fn(std::integral_constant<DType, D>{}) for the weight dtype, so each kernel is
// written once as a template over D.
template <class Fn>
inline void WithWeightDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(std::integral_constant<DType, DType::kF32>{});
    case DType::kBF16: return fn(std::integral_constant<DType, DType::kBF16>{});
    case DType::kF16: return fn(std::integral_constant<DType, DType::kF16>{});
    default: return;
  }
}

template <DType D>
constexpr int kWeightBytes = D == DType::kF32 ? 4 : 2;

// y[t*ldy + r] for T tokens x R rows: each weight chunk is loaded once and used for all T
// tokens. Every (t, r) dot product is summed in the same order whatever T and R are (four
// accumulators over 4-vector column chunks, the remainder into the first, combined as
// (a0 + a1) + (a2 + a3), then the scalar tail), so a token's result never depends on how many
// other tokens share its batch: the forward pass is batch-invariant.
template <class V, DType D, int T, int R>
inline void MatMulBlock(const float* x, int64_t cols, const std::byte* const* rows, float* y,
                        int64_t ldy) {
  typename V::Reg acc[T][R][4];
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < 4; ++j) acc[t][r][j] = V::Zero();
  constexpr int64_t kStep = 4 * V::kLanes;
  int64_t c = 0;
  for (; c + kStep <= cols; c += kStep) {
    for (int j = 0; j < 4; ++j) {
      const int64_t cj = c + j * V::kLanes;
      typename V::Reg w[R];
      for (int r = 0; r < R; ++r) w[r] = V::template LoadW<D>(rows[r] + cj * kWeightBytes<D>);
      for (int t = 0; t < T; ++t) {
        const typename V::Reg xv = V::LoadF32(x + t * cols + cj);
        for (int r = 0; r < R; ++r) acc[t][r][j] = V::Fma(xv, w[r], acc[t][r][j]);
      }
    }
  }
  for (; c + V::kLanes <= cols; c += V::kLanes) {
    typename V::Reg w[R];
    for (int r = 0; r < R; ++r) w[r] = V::template LoadW<D>(rows[r] + c * kWeightBytes<D>);
    for (int t = 0; t < T; ++t) {
      const typename V::Reg xv = V::LoadF32(x + t * cols + c);
      for (int r = 0; r < R; ++r) acc[t][r][0] = V::Fma(xv, w[r], acc[t][r][0]);
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) {
      float sum = V::Sum(V::Add(V::Add(acc[t][r][0], acc[t][r][1]), V::Add(acc[t][r][2], acc[t][r][3])));
      for (int64_t cc = c; cc < cols; ++cc) {
        sum += x[t * cols + cc] * LoadAsF32<D>(rows[r] + cc * kWeightBytes<D>);
      }
      y[t * ldy + r] = sum;
    }
  }
}

// The last `left` (< kMaxTokens) tokens of a tile, with a block of exactly that many.
template <class V, DType D, int R, int T>
inline void MatMulTail(int left, const float* x, int64_t cols, const std::byte* const* rows, float* y,
                       int64_t ldy) {
  if constexpr (T > 0) {
    if (left == T) return MatMulBlock<V, D, T, R>(x, cols, rows, y, ldy);
    MatMulTail<V, D, R, T - 1>(left, x, cols, rows, y, ldy);
  }
}

template <class V, DType D, int R>
inline void MatMulRowBlock(const float* x, int64_t n, int64_t cols, const std::byte* const* rows,
                           float* y, int64_t ldy) {
  constexpr int kT = V::kMaxTokens;
  int64_t t = 0;
  for (; t + kT <= n; t += kT) MatMulBlock<V, D, kT, R>(x + t * cols, cols, rows, y + t * ldy, ldy);
  MatMulTail<V, D, R, kT - 1>(int(n - t), x + t * cols, cols, rows, y + t * ldy, ldy);
}

template <class V, DType D>
void MatMulRowsTyped(const float* x, int64_t n, const WeightMatrix& w, int64_t row_begin,
                     int64_t row_end, float* y, int64_t ldy) {
  if (n == 1) {
    // Decode: one row after another, so the matrix is read as one sequential stream, which the
    // hardware prefetchers follow better than several interleaved row streams.
    for (int64_t r = row_begin; r < row_end; ++r) {
      const std::byte* row = w.row(r);
      MatMulBlock<V, D, 1, 1>(x, w.cols, &row, y + r, ldy);
    }
    return;
  }
  // Token tiles keep the activations in L2 while the tile's weight rows stream past.
  constexpr int64_t kTokenTile = 32;
  constexpr int kR = V::kRowBlock;
  for (int64_t t0 = 0; t0 < n; t0 += kTokenTile) {
    const int64_t nt = std::min(kTokenTile, n - t0);
    const float* xt = x + t0 * w.cols;
    float* yt = y + t0 * ldy;
    int64_t r = row_begin;
    for (; r + kR <= row_end; r += kR) {
      const std::byte* rows[kR];
      for (int i = 0; i < kR; ++i) rows[i] = w.row(r + i);
      MatMulRowBlock<V, D, kR>(xt, nt, w.cols, rows, yt + r, ldy);
    }
    for (; r < row_end; ++r) {
      const std::byte* rows[1] = {w.row(r)};
      MatMulRowBlock<V, D, 1>(xt, nt, w.cols, rows, yt + r, ldy);
    }
  }
}

// ---- Quantized weights (fp8 block-scaled, int4 grouped) ------------------------------------
// The codes are widened in registers and multiplied by their block's scale (one vector multiply
// per weight vector, shared by every token; fp8 panels fold the scale into the activations
// instead, see Fp8Panels), then summed in the same order as the dense kernels.

// LoadFp8 reinterprets E4M3 as fp16 (exponent field shifted in place), which is value / 256.
inline constexpr float kFp8LoadScale = 256.0f;

template <class V, WeightFormat F>
inline typename V::Reg LoadCodes(const std::byte* p) {
  if constexpr (F == WeightFormat::kFp8Block) return V::LoadFp8(p);
  else if constexpr (F == WeightFormat::kInt8Group) return V::LoadInt8(p);
  else if constexpr (F == WeightFormat::kUint4GroupMin) return V::LoadUint4(p);
  else if constexpr (F == WeightFormat::kUint8GroupMin) return V::LoadUint8(p);
  else return V::LoadInt4(p);
}

// Formats with a min per group beside the scale (real = code * scale - min).
constexpr bool HasMins(WeightFormat f) { return f == WeightFormat::kUint4GroupMin || f == WeightFormat::kUint8GroupMin; }

// Bytes of kLanes consecutive codes of a row-major row.
template <WeightFormat F>
constexpr int64_t RowByteOffset(int64_t c) {
  return F == WeightFormat::kInt4Group || F == WeightFormat::kUint4GroupMin ? c / 2 : c;
}

// Row-major quantized rows (kv_b_proj, read by rows): vectors need whole groups of kLanes.
// A row's scales are consecutive in the grid (column block g at g), so a row's loop walks them
// with a counter: a division per group (the block index of a column) cost the decode's absorbed
// attention more than its multiply-adds.
template <WeightFormat F>
inline const std::byte* RowScales(const WeightMatrix& w, int64_t r) {
  const int64_t grid_row = F == WeightFormat::kFp8Block ? (w.scale_row0 + r) / w.block_rows : w.scale_row0 + r;
  const size_t scale_bytes = F == WeightFormat::kInt4Group ? 2 : HasMins(F) ? 8 : 4;
  return static_cast<const std::byte*>(w.scales) + size_t(grid_row * w.scale_cols()) * scale_bytes;
}
template <class V, WeightFormat F>
inline typename V::Reg RowScale(const std::byte* row_scales, int64_t g) {
  if constexpr (F == WeightFormat::kInt4Group) return V::Broadcast(LoadBf16Unaligned(row_scales, size_t(g)));
  else if constexpr (F == WeightFormat::kFp8Block) return V::Broadcast(LoadF32Unaligned(row_scales, size_t(g)) * kFp8LoadScale);
  else if constexpr (HasMins(F)) return V::Broadcast(LoadF32Unaligned(row_scales, size_t(2 * g)));
  else return V::Broadcast(LoadF32Unaligned(row_scales, size_t(g)));
}
// -min of group g (kUint4GroupMin's pairs (scale, min)).
template <class V>
inline typename V::Reg RowNegMin(const std::byte* row_scales, int64_t g) {
  return V::Broadcast(-LoadF32Unaligned(row_scales, size_t(2 * g + 1)));
}

template <class V, WeightFormat F>
float DotRowQuant(const float* x, const WeightMatrix& w, int64_t r) {
  const std::byte* row = w.row(r);
  const std::byte* row_scales = RowScales<F>(w, r);
  typename V::Reg acc = V::Zero();
  int64_t c = 0;
  for (int64_t g = 0; c + V::kLanes <= w.cols; ++g) {  // c = g * block_cols here
    const typename V::Reg s = RowScale<V, F>(row_scales, g);
    const int64_t group_end = std::min<int64_t>(w.cols, c + w.block_cols);
    if constexpr (HasMins(F)) {
      const typename V::Reg neg_min = RowNegMin<V>(row_scales, g);
      for (; c + V::kLanes <= group_end; c += V::kLanes) {
        acc = V::Fma(V::LoadF32(x + c), V::Fma(LoadCodes<V, F>(row + RowByteOffset<F>(c)), s, neg_min), acc);
      }
    } else {
      for (; c + V::kLanes <= group_end; c += V::kLanes) {
        acc = V::Fma(V::LoadF32(x + c), V::Mul(LoadCodes<V, F>(row + RowByteOffset<F>(c)), s), acc);
      }
    }
    if (c < group_end) break;
  }
  float sum = V::Sum(acc);
  for (; c < w.cols; ++c) sum += x[c] * WeightAt(w, r, c);
  return sum;
}

template <class V, WeightFormat F>
void MatMulRowsQuant(const float* x, int64_t n, const WeightMatrix& w, int64_t row_begin, int64_t row_end,
                     float* y, int64_t ldy) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t t = 0; t < n; ++t) y[t * ldy + r] = DotRowQuant<V, F>(x + t * w.cols, w, r);
  }
}

template <class V, WeightFormat F>
void AxpyRowQuant(float a, const WeightMatrix& w, int64_t r, float* y) {
  const std::byte* row = w.row(r);
  const std::byte* row_scales = RowScales<F>(w, r);
  int64_t c = 0;
  for (int64_t g = 0; c + V::kLanes <= w.cols; ++g) {  // c = g * block_cols here
    const int64_t group_end = std::min<int64_t>(w.cols, c + w.block_cols);
    if constexpr (HasMins(F)) {
      // y += a * (code * scale - min), the weight formed as WeightAt forms it.
      const typename V::Reg s = RowScale<V, F>(row_scales, g), neg_min = RowNegMin<V>(row_scales, g);
      const typename V::Reg av = V::Broadcast(a);
      for (; c + V::kLanes <= group_end; c += V::kLanes) {
        const typename V::Reg wv = V::Fma(LoadCodes<V, F>(row + RowByteOffset<F>(c)), s, neg_min);
        V::StoreF32(y + c, V::Fma(av, wv, V::LoadF32(y + c)));
      }
    } else {
      const typename V::Reg s = V::Mul(V::Broadcast(a), RowScale<V, F>(row_scales, g));
      for (; c + V::kLanes <= group_end; c += V::kLanes) {
        V::StoreF32(y + c, V::Fma(s, LoadCodes<V, F>(row + RowByteOffset<F>(c)), V::LoadF32(y + c)));
      }
    }
    if (c < group_end) break;
  }
  for (; c < w.cols; ++c) y[c] += a * WeightAt(w, r, c);
}

// Calls fn(std::integral_constant<WeightFormat, F>{}) for a quantized matrix's format.
template <class Fn>
inline void WithQuantFormat(WeightFormat format, Fn&& fn) {
  if (format == WeightFormat::kFp8Block) return fn(std::integral_constant<WeightFormat, WeightFormat::kFp8Block>{});
  if (format == WeightFormat::kInt8Group) return fn(std::integral_constant<WeightFormat, WeightFormat::kInt8Group>{});
  if (format == WeightFormat::kUint4GroupMin) {
    return fn(std::integral_constant<WeightFormat, WeightFormat::kUint4GroupMin>{});
  }
  if (format == WeightFormat::kUint8GroupMin) {
    return fn(std::integral_constant<WeightFormat, WeightFormat::kUint8GroupMin>{});
  }
  return fn(std::integral_constant<WeightFormat, WeightFormat::kInt4Group>{});
}

template <class V>
void MatMulRows(const float* x, int64_t n, const WeightMatrix& w, int64_t row_begin,
                int64_t row_end, float* y, int64_t ldy) {
  if (w.quantized()) {
    return WithQuantFormat(w.format, [&](auto f) { MatMulRowsQuant<V, decltype(f)::value>(x, n, w, row_begin, row_end, y, ldy); });
  }
  WithWeightDType(w.dtype, [&](auto d) { MatMulRowsTyped<V, decltype(d)::value>(x, n, w, row_begin, row_end, y, ldy); });
}

// ---- Packed panels ---------------------------------------------------------------------------
// For each column c, the 16 weights of a panel row are loaded as vectors and multiplied by x[t][c]
// broadcast, accumulating kLanes outputs per vector with no horizontal sums. A block covers NV
// output vectors (rows row0 + v * kLanes) for T tokens: T x NV accumulators, each one FMA chain.
// Each output is summed over c in order whatever T and NV are, so results are batch-invariant.
// The driver uses NV = 2 (two panels on AVX-512, one on AVX2): 4 and 8 were measured slower, even
// for one token, where they would hide more FMA latency (more concurrent panel streams).
//
// A block at the end of the range may have fewer vectors than NV: the missing ones read vector 0
// again (the same bytes, already in L1) and are not stored, so the inner loops never branch.

// Asks for the panel bytes kPrefetchColumns columns ahead of p (column_bytes apart). The hardware
// prefetchers alone left fp8 and bf16 decode 20-25% below the bandwidth they reach with this
// (one token, 2 threads, bench-models/reference-sized matrices).
inline constexpr int64_t kPrefetchColumns = 64;
inline void PrefetchAhead(const std::byte* p, int64_t column_bytes) {
  __builtin_prefetch(p + kPrefetchColumns * column_bytes);
}
// The same at byte `pos` of a panel's stream of `stream_bytes`, in a block of `panels` panels side
// by side: past the panel's end into this stream's panel of the next block (PanelPrefetchAddress).
// The fp8 panels (Fp8Panels::Columns) keep the plain address: not measured with this.
inline void PrefetchAhead(const std::byte* p, int64_t column_bytes, int64_t pos, int64_t stream_bytes, int panels) {
  __builtin_prefetch(PanelPrefetchAddress(p, pos, kPrefetchColumns * column_bytes, stream_bytes, panels));
}
// Panels a block of NV vectors of V::kLanes rows reads side by side.
template <class V, int NV>
inline constexpr int kBlockPanels = NV * V::kLanes >= kPanelRows ? NV * V::kLanes / kPanelRows : 1;

// One panel block's geometry: the rows its vectors start at and how many rows it writes.
template <int NV>
struct PanelBlockRows {
  int64_t row[NV];  // vector v's first row; row[0] for a vector past the range
  int rows_valid;   // rows row[0] .. row[0] + rows_valid are stored
};

template <class V, int NV>
inline PanelBlockRows<NV> BlockRows(int64_t row0, int64_t row_limit) {
  PanelBlockRows<NV> b;
  for (int v = 0; v < NV; ++v) b.row[v] = row0 + v * V::kLanes < row_limit ? row0 + v * V::kLanes : row0;
  b.rows_valid = int(std::min<int64_t>(NV * V::kLanes, row_limit - row0));
  return b;
}

// Writes T tokens x NV output vectors: rows_valid of the NV * kLanes rows.
template <class V, int T, int NV>
inline void StorePanelOutputs(const typename V::Reg (&acc)[T][NV], float* y, int64_t ldy, int rows_valid) {
  for (int t = 0; t < T; ++t) {
    if (rows_valid == NV * V::kLanes) {
      for (int v = 0; v < NV; ++v) V::StoreF32(y + t * ldy + v * V::kLanes, acc[t][v]);
    } else {
      float out[NV * V::kLanes];
      for (int v = 0; v < NV; ++v) V::StoreF32(out + v * V::kLanes, acc[t][v]);
      for (int i = 0; i < rows_valid; ++i) y[t * ldy + i] = out[i];
    }
  }
}

// Reads back what StorePanelOutputs wrote (partial sums between column chunks).
template <class V, int T, int NV>
inline void LoadPanelOutputs(const float* y, int64_t ldy, int rows_valid, typename V::Reg (&acc)[T][NV]) {
  for (int t = 0; t < T; ++t) {
    if (rows_valid == NV * V::kLanes) {
      for (int v = 0; v < NV; ++v) acc[t][v] = V::LoadF32(y + t * ldy + v * V::kLanes);
    } else {
      float in[NV * V::kLanes] = {};
      for (int i = 0; i < rows_valid; ++i) in[i] = y[t * ldy + i];
      for (int v = 0; v < NV; ++v) acc[t][v] = V::LoadF32(in + v * V::kLanes);
    }
  }
}

// Calls fn(std::integral_constant<int, T>{}) for T == n, 1 <= n <= kMax.
template <int kMax, class Fn>
inline void WithTokenCount(int n, Fn&& fn) {
  if constexpr (kMax > 0) {
    if (n == kMax) return fn(std::integral_constant<int, kMax>{});
    WithTokenCount<kMax - 1>(n, fn);
  }
}

// The widened-weight micro-kernel, for T tokens of a block: y[t][v] (the block's partial sums;
// zero when `first`) += a[v][t * a_stride + i * kColumnStride] * widened[i][v] over i < len in
// order, widened being the block's weights already widened (and, for int4, scaled) into fp32
// [len][NV][kLanes]. kShared: every vector reads the same activations (a[0]). Activations are
// rows (kColumnStride 1: a quantized prefill's chunks) or packed tiles (a_stride 1,
// kColumnStride kGemmTileTokens: GemmTile). The accumulators are local so that they stay in
// registers.
template <class V, int T, int NV, bool kShared, int64_t kColumnStride = 1>
inline void AccumulateWidened(const float* const (&a)[NV], int64_t a_stride, const float* widened, int64_t len,
                              bool first, float* y, int64_t ldy, int rows_valid) {
  typename V::Reg acc[T][NV];
  if (first) {
    for (int t = 0; t < T; ++t)
      for (int v = 0; v < NV; ++v) acc[t][v] = V::Zero();
  } else {
    LoadPanelOutputs<V, T, NV>(y, ldy, rows_valid, acc);
  }
  for (int64_t i = 0; i < len; ++i) {
    typename V::Reg wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = V::LoadF32(widened + (i * NV + v) * V::kLanes);
#pragma GCC unroll 16  // the accumulators must stay in registers (GCC 12 left them in memory)
    for (int t = 0; t < T; ++t) {
      if constexpr (kShared) {
        const typename V::Reg xv = V::Broadcast(a[0][t * a_stride + i * kColumnStride]);
        for (int v = 0; v < NV; ++v) acc[t][v] = V::Fma(xv, wv[v], acc[t][v]);
      } else {
        for (int v = 0; v < NV; ++v) {
          acc[t][v] = V::Fma(V::Broadcast(a[v][t * a_stride + i * kColumnStride]), wv[v], acc[t][v]);
        }
      }
    }
  }
  StorePanelOutputs<V, T, NV>(acc, y, ldy, rows_valid);
}

// Dense panels ([cols][16] values of dtype D).
template <class V, DType D>
struct DensePanels {
  const WeightMatrix& w;

  // The packed-activation product (MatMulPanelsPacked): columns c0 .. c0 + len of the block's
  // vectors as fp32 into widened[len][NV], exactly what Run widens (bf16 and fp16 widen exactly).

  template <int NV>
  void Widen(const PanelBlockRows<NV>& b, int64_t c0, int64_t len, float* widened) const {
    for (int v = 0; v < NV; ++v) {
      const std::byte* p = w.panel(b.row[v] / kPanelRows) + (b.row[v] % kPanelRows) * kWeightBytes<D>;
      for (int64_t i = 0; i < len; ++i) {
        V::StoreF32(widened + (i * NV + v) * V::kLanes, V::template LoadW<D>(p + (c0 + i) * kStep));
      }
    }
  }

  template <int T, int NV>
  void Run(const float* x, const PanelBlockRows<NV>& b, float* y, int64_t ldy) const {
    const std::byte* p[NV];
    for (int v = 0; v < NV; ++v) p[v] = w.panel(b.row[v] / kPanelRows) + (b.row[v] % kPanelRows) * kWeightBytes<D>;
    typename V::Reg acc[T][NV];
    for (int t = 0; t < T; ++t)
      for (int v = 0; v < NV; ++v) acc[t][v] = V::Zero();
    Columns<T, NV>(x, w.cols, p, acc);
    StorePanelOutputs<V, T, NV>(acc, y, ldy, b.rows_valid);
  }

 private:
  static constexpr int64_t kStep = kPanelRows * kWeightBytes<D>;

  // (A function of its own, with the accumulators passed in: written inline in Run, GCC 12 kept a
  // copy of every accumulator in memory, stored each column, and ran at half speed.)
  template <int T, int NV>
  static void Columns(const float* x, int64_t cols, const std::byte* const (&p)[NV], typename V::Reg (&acc)[T][NV]) {
    for (int64_t c = 0; c < cols; ++c) {
      typename V::Reg wv[NV];
      for (int v = 0; v < NV; ++v) {
        // One prefetch per cache line (a BF16 column is half of one): bench-kernels' one-token
        // stream read ~5% more with it than with one per column.
        if (kStep >= 64 || c % (64 / kStep) == 0) {
          PrefetchAhead(p[v] + c * kStep, kStep, c * kStep, cols * kStep, kBlockPanels<V, NV>);
        }
        wv[v] = V::template LoadW<D>(p[v] + c * kStep);
      }
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const typename V::Reg xv = V::Broadcast(x[t * cols + c]);
        for (int v = 0; v < NV; ++v) acc[t][v] = V::Fma(xv, wv[v], acc[t][v]);
      }
    }
  }
};

// Grouped panels, walked a column pair at a time. int4: [cols / 2][16] bytes, byte k of column
// pair j holding lane k's nibble of column 2j (low) and of column 2j + 1 (high), so one byte load
// per lane serves two columns; group scales BF16 [panel][cols / group][16]. int8: [cols / 4][16][4]
// codes (a 32-bit word per lane holds four columns), group scales F32 [panel][cols / group][16].
// uint4-min: [cols / 8][16][4] nibbles (a 32-bit word per lane holds eight columns), scales then
// mins F32 [panel][cols / group][2][16], each weight code * scale - min (one FMA).
// Each weight vector is widened, multiplied by
// its lanes' scales, then used for every token. cols and the group size are even (config.cc and
// the GGUF reader refuse others), so a column pair never straddles two groups.
template <class V, WeightFormat F>
struct GroupPanels {
  static_assert(F == WeightFormat::kInt4Group || F == WeightFormat::kInt8Group || F == WeightFormat::kUint4GroupMin ||
                F == WeightFormat::kUint8GroupMin);
  static constexpr bool kMin = HasMins(F);
  const WeightMatrix& w;

  // Where the lanes of the vector starting at `row` begin in its panel.
  const std::byte* LaneBase(int64_t row) const {
    return w.panel(row / kPanelRows) + (row % kPanelRows) * (F == WeightFormat::kInt4Group ? 1 : 4);
  }
  // Columns c and c + 1 (c even) of the panel lanes at p (LaneBase), widened (before their scale).
  static void LoadPair(const std::byte* p, int64_t c, typename V::Reg& even, typename V::Reg& odd) {
    if constexpr (F == WeightFormat::kInt4Group) {
      V::LoadInt4Columns(p + (c / 2) * kPanelRows, even, odd);
    } else if constexpr (F == WeightFormat::kUint4GroupMin) {
      V::LoadUint4Pair(p + (c / 8) * 4 * kPanelRows, c % 4 != 0, c % 8 >= 4, even, odd);
    } else if constexpr (F == WeightFormat::kUint8GroupMin) {
      V::template LoadBytePair<false>(p + (c / 4) * 4 * kPanelRows, c % 4 != 0, even, odd);
    } else {
      V::template LoadBytePair<true>(p + (c / 4) * 4 * kPanelRows, c % 4 != 0, even, odd);
    }
  }
  // code * scale (- min): a weight as WeightAt forms it.
  static typename V::Reg Weight(typename V::Reg code, typename V::Reg scale, typename V::Reg neg_min) {
    if constexpr (kMin) return V::Fma(code, scale, neg_min);
    else return V::Mul(code, scale);
  }
  // Bytes of a column pair in a panel.
  static constexpr int64_t kPairBytes =
      F == WeightFormat::kInt8Group || F == WeightFormat::kUint8GroupMin ? 2 * kPanelRows : kPanelRows;

  template <int T, int NV>
  void Run(const float* x, const PanelBlockRows<NV>& b, float* y, int64_t ldy) const {
    const std::byte* p[NV];
    for (int v = 0; v < NV; ++v) p[v] = LaneBase(b.row[v]);
    typename V::Reg acc[T][NV];
    for (int t = 0; t < T; ++t)
      for (int v = 0; v < NV; ++v) acc[t][v] = V::Zero();
    Columns<T, NV>(x, b, p, acc);
    StorePanelOutputs<V, T, NV>(acc, y, ldy, b.rows_valid);
  }

  // Prefill (see MatMulPanelBlocksWidened): columns c .. c + len (even, len even) of the block's
  // vectors as fp32 code * scale (int4: nibble - 8), exactly the products Run forms, into
  // widened[len][NV].
  static constexpr int64_t kWidenColumns = 128;
  static constexpr int kWidenAfterTiles = 3;
  int64_t WidenLength(int64_t c) const { return std::min(kWidenColumns, w.cols - c); }

  template <int NV>
  void Widen(const PanelBlockRows<NV>& b, int64_t c0, int64_t len, float* widened) const {
    for (int v = 0; v < NV; ++v) {
      const std::byte* p = LaneBase(b.row[v]);
      typename V::Reg s = Scale(b.row[v], c0 / w.block_cols), nm = NegMin(b.row[v], c0 / w.block_cols);
      for (int64_t c = c0; c < c0 + len; c += 2) {
        if (c % w.block_cols == 0) {
          s = Scale(b.row[v], c / w.block_cols);
          nm = NegMin(b.row[v], c / w.block_cols);
        }
        typename V::Reg even, odd;
        LoadPair(p, c, even, odd);
        V::StoreF32(widened + ((c - c0) * NV + v) * V::kLanes, Weight(even, s, nm));
        V::StoreF32(widened + ((c + 1 - c0) * NV + v) * V::kLanes, Weight(odd, s, nm));
      }
    }
  }

  // y (T tokens of the block) += x[t][c0 ..] * widened, over len columns.
  template <int T, int NV>
  void AccumulateChunk(const float* x, const PanelBlockRows<NV>& b, int64_t c0, int64_t len, const float* widened,
                       float* y, int64_t ldy) const {
    const float* a[NV];
    for (int v = 0; v < NV; ++v) a[v] = x + c0;
    AccumulateWidened<V, T, NV, true>(a, w.cols, widened, len, c0 == 0, y, ldy, b.rows_valid);
  }

 private:
  // Accumulates every column (a function of its own: see DensePanels::Columns).
  template <int T, int NV>
  void Columns(const float* x, const PanelBlockRows<NV>& b, const std::byte* const (&p)[NV],
               typename V::Reg (&acc)[T][NV]) const {
    const int64_t cols = w.cols;
    const auto fma_column = [&](int64_t c, const typename V::Reg (&wv)[NV]) {
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const typename V::Reg xv = V::Broadcast(x[t * cols + c]);
        for (int v = 0; v < NV; ++v) acc[t][v] = V::Fma(xv, wv[v], acc[t][v]);
      }
    };
    for (int64_t g = 0, c = 0; c < cols; ++g) {
      typename V::Reg s[NV], nm[NV];
      for (int v = 0; v < NV; ++v) {
        s[v] = Scale(b.row[v], g);
        nm[v] = NegMin(b.row[v], g);
      }
      const int64_t group_end = std::min<int64_t>(cols, c + w.block_cols);
      for (; c < group_end; c += 2) {
        typename V::Reg even[NV], odd[NV];
        for (int v = 0; v < NV; ++v) {
          PrefetchAhead(p[v] + (c / 2) * kPairBytes, kPairBytes / 2, (c / 2) * kPairBytes, (cols / 2) * kPairBytes,
                        kBlockPanels<V, NV>);
          LoadPair(p[v], c, even[v], odd[v]);
          even[v] = Weight(even[v], s[v], nm[v]);
          odd[v] = Weight(odd[v], s[v], nm[v]);
        }
        fma_column(c, even);
        fma_column(c + 1, odd);
      }
    }
  }

  // The scales of rows row.. (a multiple of kLanes) in column group g.
  typename V::Reg Scale(int64_t row, int64_t g) const {
    // [panel][group][16], uint4-min's [panel][group][2][16] (scales first).
    const size_t group_index = size_t((row / kPanelRows) * w.scale_cols() + g) * (kMin ? 2 : 1);
    const size_t index = group_index * kPanelRows + size_t(row % kPanelRows);
    const auto* s = static_cast<const std::byte*>(w.scales);
    if constexpr (F == WeightFormat::kInt4Group) return V::template LoadW<DType::kBF16>(s + index * 2);
    else return V::template LoadW<DType::kF32>(s + index * 4);
  }
  // The negated mins of rows row.. in column group g (uint4-min; zero otherwise, unused).
  typename V::Reg NegMin(int64_t row, int64_t g) const {
    if constexpr (kMin) {
      // [panel][group][2][16]: the mins are the 16 floats after the group's scales.
      const size_t at = size_t(((row / kPanelRows) * w.scale_cols() + g) * 2 * kPanelRows + kPanelRows + row % kPanelRows);
      return V::Mul(V::template LoadW<DType::kF32>(static_cast<const std::byte*>(w.scales) + at * 4), V::Broadcast(-1.0f));
    } else {
      return V::Zero();
    }
  }
};
// fp8 panels: the block scale is folded into the activations instead of the weights. Each vector
// lies in one block_rows band; for each band the block touches, x[t][c] * scale is computed once
// per (token, column) into a small buffer, so the inner loop is the dense one (widen, FMA) with no
// per-weight multiply. Every output is (x * scale) * code summed over c in order, whatever the
// block's size or bands, so results stay batch-invariant.
template <class V>
struct Fp8Panels {
  static constexpr int64_t kChunk = 128;  // columns of scaled activations buffered at a time
  static constexpr int64_t kStep = kPanelRows;
  static constexpr int kPairedColumnsMaxTokens = 4;
  const WeightMatrix& w;

  // The distinct bands of rows a block's vectors lie in: vector v's scaled activations are slot[v].
  template <int NV>
  struct Bands {
    int64_t band[NV];
    int slot[NV];
    int count = 0;
  };
  template <int NV>
  Bands<NV> BandsOf(const PanelBlockRows<NV>& b) const {
    Bands<NV> r;
    for (int v = 0; v < NV; ++v) {
      const int64_t bv = b.row[v] / w.block_rows;
      r.slot[v] = 0;
      while (r.slot[v] < r.count && r.band[r.slot[v]] != bv) ++r.slot[v];
      if (r.slot[v] == r.count) r.band[r.count++] = bv;
    }
    return r;
  }

  template <int T, int NV>
  void Run(const float* x, const PanelBlockRows<NV>& b, float* y, int64_t ldy) const {
    const Bands<NV> bs = BandsOf(b);
    const int64_t* band = bs.band;
    const int(&slot)[NV] = bs.slot;
    const int bands = bs.count;
    const std::byte* p[NV];
    for (int v = 0; v < NV; ++v) p[v] = w.panel(b.row[v] / kPanelRows) + b.row[v] % kPanelRows;
    const int64_t cols = w.cols;
    alignas(64) float xs[NV * T * kChunk];  // [band slot][token][column in chunk]
    typename V::Reg acc[T][NV];
    for (int t = 0; t < T; ++t)
      for (int v = 0; v < NV; ++v) acc[t][v] = V::Zero();
    for (int64_t g = 0, c = 0; c < cols; ++g) {
      const int64_t group_end = std::min<int64_t>(cols, c + w.block_cols);
      while (c < group_end) {
        const int64_t len = std::min(kChunk, group_end - c);
        for (int s = 0; s < bands; ++s) {
          const float scale = LoadF32Unaligned(w.scales, size_t(band[s] * w.scale_cols() + g)) * kFp8LoadScale;
          ScaleActivations(x + c, cols, len, scale, xs + s * T * kChunk, T);
        }
        if (bands == 1) {
          Columns<T, NV, true>(xs, slot, p, c, len, acc);
        } else {
          Columns<T, NV, false>(xs, slot, p, c, len, acc);
        }
        c += len;
      }
    }
    StorePanelOutputs<V, T, NV>(acc, y, ldy, b.rows_valid);
  }

  // Prefill (see MatMulPanelBlocksWidened): chunks stay inside one column block (one scale).
  static constexpr int64_t kWidenColumns = kChunk;
  static constexpr int kWidenAfterTiles = 1;
  int64_t WidenLength(int64_t c) const {
    return std::min({kWidenColumns, w.cols - c, w.block_cols - c % w.block_cols});
  }

  // Columns c0 .. c0 + len of the block's vectors as fp32 code / 256, exactly what Run widens.
  template <int NV>
  void Widen(const PanelBlockRows<NV>& b, int64_t c0, int64_t len, float* widened) const {
    for (int v = 0; v < NV; ++v) {
      const std::byte* p = w.panel(b.row[v] / kPanelRows) + b.row[v] % kPanelRows;
      int64_t i = 0;
      for (; i + 2 <= len; i += 2) {
        typename V::Reg a, b2;
        V::LoadFp8Columns(p + (c0 + i) * kStep, a, b2);
        V::StoreF32(widened + (i * NV + v) * V::kLanes, a);
        V::StoreF32(widened + ((i + 1) * NV + v) * V::kLanes, b2);
      }
      for (; i < len; ++i) V::StoreF32(widened + (i * NV + v) * V::kLanes, V::LoadFp8(p + (c0 + i) * kStep));
    }
  }

  // y (T tokens of the block) += (x[t][c0 ..] * scale of each vector's band) * widened.
  template <int T, int NV>
  void AccumulateChunk(const float* x, const PanelBlockRows<NV>& b, int64_t c0, int64_t len, const float* widened,
                       float* y, int64_t ldy) const {
    const Bands<NV> bs = BandsOf(b);
    alignas(64) float xs[NV * T * kChunk];  // [band slot][token][column in chunk]
    for (int s = 0; s < bs.count; ++s) {
      const float scale =
          LoadF32Unaligned(w.scales, size_t(bs.band[s] * w.scale_cols() + c0 / w.block_cols)) * kFp8LoadScale;
      ScaleActivations(x + c0, w.cols, len, scale, xs + s * T * kChunk, T);
    }
    const float* a[NV];
    for (int v = 0; v < NV; ++v) a[v] = xs + bs.slot[v] * T * kChunk;
    if (bs.count == 1) {
      AccumulateWidened<V, T, NV, true>(a, kChunk, widened, len, c0 == 0, y, ldy, b.rows_valid);
    } else {
      AccumulateWidened<V, T, NV, false>(a, kChunk, widened, len, c0 == 0, y, ldy, b.rows_valid);
    }
  }

 private:
  // xs[t][i] = x[t * cols + i] * scale for the chunk's len columns.
  static void ScaleActivations(const float* x, int64_t cols, int64_t len, float scale, float* xs, int T) {
    const typename V::Reg sv = V::Broadcast(scale);
    for (int t = 0; t < T; ++t) {
      int64_t i = 0;
      for (; i + V::kLanes <= len; i += V::kLanes) {
        V::StoreF32(xs + t * kChunk + i, V::Mul(V::LoadF32(x + t * cols + i), sv));
      }
      for (; i < len; ++i) xs[t * kChunk + i] = x[t * cols + i] * scale;
    }
  }

  // Accumulates columns c .. c + len. kOneBand: every vector reads band slot 0, one broadcast per
  // (token, column) serves them all.
  template <int T, int NV, bool kOneBand>
  static void Columns(const float* xs, const int (&slot)[NV], const std::byte* const (&p)[NV], int64_t c,
                      int64_t len, typename V::Reg (&acc)[T][NV]) {
    const auto fma_column = [&](int64_t i, const typename V::Reg (&wv)[NV]) {
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        if constexpr (kOneBand) {
          const typename V::Reg xv = V::Broadcast(xs[t * kChunk + i]);
          for (int v = 0; v < NV; ++v) acc[t][v] = V::Fma(xv, wv[v], acc[t][v]);
        } else {
          for (int v = 0; v < NV; ++v) {
            acc[t][v] = V::Fma(V::Broadcast(xs[(slot[v] * T + t) * kChunk + i]), wv[v], acc[t][v]);
          }
        }
      }
    };
    int64_t i = 0;
    // Two columns at a time: their codes are adjacent in the panel, widened together. (Large
    // token tiles already spend most of their time in FMAs and would run out of registers.)
    if constexpr (T <= kPairedColumnsMaxTokens)
    for (; i + 2 <= len; i += 2) {
      typename V::Reg wa[NV], wb[NV];
      for (int v = 0; v < NV; ++v) {
        PrefetchAhead(p[v] + (c + i) * kStep, kStep);
        V::LoadFp8Columns(p[v] + (c + i) * kStep, wa[v], wb[v]);
      }
      fma_column(i, wa);
      fma_column(i + 1, wb);
    }
    for (; i < len; ++i) {
      typename V::Reg wv[NV];
      for (int v = 0; v < NV; ++v) wv[v] = V::LoadFp8(p[v] + (c + i) * kStep);
      fma_column(i, wv);
    }
  }
};

// The last `left` (< T) tokens of a tile, with a block of exactly that many.
template <int T, int NV, class K>
inline void PanelTail(const K& k, int left, const float* x, const PanelBlockRows<NV>& b, float* y, int64_t ldy) {
  if constexpr (T > 0) {
    if (left == T) return k.template Run<T, NV>(x, b, y, ldy);
    PanelTail<T - 1, NV>(k, left, x, b, y, ldy);
  }
}

// Panels [panel_begin, panel_end) of k.w for n tokens, in blocks of two output vectors (more
// vectors means more concurrent panel streams, which measured slower, even for one token).
template <class V, class K>
void MatMulPanelBlocks(const K& k, const float* x, int64_t n, int64_t panel_begin, int64_t panel_end, float* y,
                       int64_t ldy) {
  const WeightMatrix& w = k.w;
  const int64_t row_limit = std::min(w.rows, panel_end * kPanelRows);
  constexpr int kT = V::kPanelTokens;
  for (int64_t row0 = panel_begin * kPanelRows; row0 < row_limit; row0 += 2 * V::kLanes) {
    const PanelBlockRows<2> b = BlockRows<V, 2>(row0, row_limit);
    int64_t t = 0;
    for (; t + kT <= n; t += kT) k.template Run<kT, 2>(x + t * w.cols, b, y + t * ldy + row0, ldy);
    PanelTail<kT - 1, 2>(k, int(n - t), x + t * w.cols, b, y + t * ldy + row0, ldy);
  }
}

// Quantized panels for more tokens than one tile (prefill): each block's codes are widened once
// per chunk of columns into fp32 scratch, the very values Run holds in registers, and every token
// tile accumulates from the scratch, its partial sums kept in y between chunks. A weight is then
// widened once per call instead of once per tile, so prefill runs at the dense fp32 kernel's
// speed. Each output is still the same products summed over c in order: batch-invariant.
template <class V, class K>
void MatMulPanelBlocksWidened(const K& k, const float* x, int64_t n, int64_t panel_begin, int64_t panel_end,
                              float* y, int64_t ldy) {
  const WeightMatrix& w = k.w;
  const int64_t row_limit = std::min(w.rows, panel_end * kPanelRows);
  constexpr int kT = V::kPanelTokens;
  alignas(64) float widened[K::kWidenColumns * 2 * V::kLanes];  // [column in chunk][vector][lane]
  for (int64_t row0 = panel_begin * kPanelRows; row0 < row_limit; row0 += 2 * V::kLanes) {
    const PanelBlockRows<2> b = BlockRows<V, 2>(row0, row_limit);
    for (int64_t c = 0, len = 0; c < w.cols; c += len) {
      len = k.WidenLength(c);
      k.Widen(b, c, len, widened);
      for (int64_t t = 0; t < n; t += kT) {
        WithTokenCount<kT>(int(std::min<int64_t>(kT, n - t)), [&](auto tokens) {
          k.template AccumulateChunk<decltype(tokens)::value, 2>(x + t * w.cols, b, c, len, widened,
                                                                 y + t * ldy + row0, ldy);
        });
      }
    }
  }
}

// Calls fn(panels) with the packed-panel reader of a quantized matrix's format: Fp8Panels, or
// GroupPanels of its group format.
template <class V, class Fn>
inline void WithQuantPanels(const WeightMatrix& w, Fn&& fn) {
  WithQuantFormat(w.format, [&](auto f) {
    constexpr WeightFormat F = decltype(f)::value;
    if constexpr (F == WeightFormat::kFp8Block) fn(Fp8Panels<V>{w});
    else fn(GroupPanels<V, F>{w});
  });
}

template <class V>
void MatMulPanels(const float* x, int64_t n, const WeightMatrix& w, int64_t panel_begin,
                  int64_t panel_end, float* y, int64_t ldy) {
  // Quantized: widened chunks once there are more than K::kWidenAfterTiles token tiles (where
  // that measured faster than widening in every tile; bench-models/reference-sized matrices).
  const auto quantized = [&](const auto& k) {
    if (n > k.kWidenAfterTiles * V::kPanelTokens) {
      return MatMulPanelBlocksWidened<V>(k, x, n, panel_begin, panel_end, y, ldy);
    }
    MatMulPanelBlocks<V>(k, x, n, panel_begin, panel_end, y, ldy);
  };
  if (w.quantized()) return WithQuantPanels<V>(w, quantized);
  WithWeightDType(w.dtype, [&](auto d) {
    MatMulPanelBlocks<V>(DensePanels<V, decltype(d)::value>{w}, x, n, panel_begin, panel_end, y, ldy);
  });
}

// ---- Prefill GEMM over packed activations ----------------------------------------------------

// xp for token tiles [tile_begin, tile_end) (layout: GemmPackedIndex in kernels.h).
template <class V>
void PackActivations(const float* x, int64_t n, const WeightMatrix& w, int64_t tile_begin, int64_t tile_end,
                     float* xp) {
  const int64_t cols = w.cols;
  constexpr int64_t kT = kGemmTileTokens;
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int64_t t0 = tile * kT;
    const int tokens = int(std::min(kT, n - t0));
    for (int64_t c0 = 0; c0 < cols; c0 += kGemmColumns) {
      const int64_t len = std::min(kGemmColumns, cols - c0);
      float* dst = xp + GemmPackedIndex(n, t0, c0);  // [len][kT]
      const float* src = x + t0 * cols + c0;          // [tokens][cols]
      if (tokens == kT) {
        for (int64_t i = 0; i < len; ++i) {
#pragma GCC unroll 12
          for (int t = 0; t < kT; ++t) dst[i * kT + t] = src[t * cols + i];
        }
      } else {
        for (int64_t i = 0; i < len; ++i) {
          for (int t = 0; t < tokens; ++t) dst[i * kT + t] = src[t * cols + i];
        }
      }
    }
  }
}

// The prefill micro-kernel: y[T tokens][NV vectors] (partial sums; zero when `first`) +=
// xp[i][t] * widened[i][v] over i < len in order. xp: T tokens' activations, kGemmTileTokens
// apart per column (a sequential stream); widened: [len][NV][kLanes] fp32 weights.
template <class V, int T, int NV>
inline void GemmTile(const float* xp, const float* widened, int64_t len, bool first, float* y, int64_t ldy,
                     int rows_valid) {
  const float* a[NV];
  for (int v = 0; v < NV; ++v) a[v] = xp;
  AccumulateWidened<V, T, NV, true, kGemmTileTokens>(a, 1, widened, len, first, y, ldy, rows_valid);
}

// The cache-blocked product: column blocks of kGemmColumns outermost (the packed activations'
// block stays in L2 while the range's output rows pass; the caller's row range is small enough
// that its partial sums [n, rows] stay in L2 too), then blocks of two output vectors, whose
// weights for the column block are widened once into fp32 scratch, the very values Run holds in
// registers; every token tile then runs the block's columns with plain FMAs, its partial sums
// stored in y between column blocks and reloaded exactly. Each output is the products summed
// over c in order, as in Run: bit-identical to MatMulPanelBlocks.
//
// fp8 (Fp8Panels folds each block scale into the activations: (x * scale) * code) scales the
// column block's packed activations once per band of block_rows rows into `scaled` (the layout
// of one xp block), shared by the band's blocks of rows; this needs a block of rows to lie in
// one band (block_rows a multiple of 2 * kLanes), which MatMulPanelsPacked checks.
template <class V, class K>
void MatMulPanelBlocksPacked(const K& k, const float* xp, float* scaled, int64_t n, int64_t panel_begin,
                             int64_t panel_end, float* y, int64_t ldy) {
  constexpr bool kFp8 = std::is_same_v<K, Fp8Panels<V>>;
  constexpr int64_t kBlockRows = 2 * V::kLanes;
  const WeightMatrix& w = k.w;
  const int64_t row_limit = std::min(w.rows, panel_end * kPanelRows);
  const int64_t tiles = GemmTiles(n);
  constexpr int64_t kTileFloats = kGemmColumns * kGemmTileTokens;  // one tile of one column block
  constexpr int kT = V::kGemmTokens;
  static_assert(kGemmTileTokens % kT == 0);
  alignas(64) float widened[kGemmColumns * 2 * V::kLanes];  // [column in block][vector][lane]
  for (int64_t c_block = 0; c_block < w.cols; c_block += kGemmColumns) {
    const int64_t len = std::min(kGemmColumns, w.cols - c_block);
    const float* xb = xp + GemmPackedIndex(n, 0, c_block);  // [tile][column in block][token in tile]
    for (int64_t row0 = panel_begin * kPanelRows; row0 < row_limit;) {
      const int64_t band_end = kFp8 ? std::min(row_limit, (row0 / w.block_rows + 1) * w.block_rows) : row_limit;
      if constexpr (kFp8) {
        for (int64_t c = c_block, run = 0; c < c_block + len; c += run) {
          run = std::min(c_block + len - c, w.block_cols - c % w.block_cols);
          const float scale =
              LoadF32Unaligned(w.scales, size_t(row0 / w.block_rows * w.scale_cols() + c / w.block_cols)) *
              kFp8LoadScale;
          const typename V::Reg sv = V::Broadcast(scale);
          for (int64_t tile = 0; tile < tiles; ++tile) {
            const int64_t at = tile * kTileFloats + (c - c_block) * kGemmTileTokens;
            const int64_t count = run * kGemmTileTokens;
            int64_t i = 0;
            for (; i + V::kLanes <= count; i += V::kLanes) {
              V::StoreF32(scaled + at + i, V::Mul(V::LoadF32(xb + at + i), sv));
            }
            for (; i < count; ++i) scaled[at + i] = xb[at + i] * scale;
          }
        }
        xb = scaled;
      }
      for (; row0 < band_end; row0 += kBlockRows) {
        const PanelBlockRows<2> b = BlockRows<V, 2>(row0, row_limit);
        k.Widen(b, c_block, len, widened);
        for (int64_t t = 0; t < n; t += kT) {
          const float* xt = xb + (t / kGemmTileTokens) * kTileFloats + t % kGemmTileTokens;
          WithTokenCount<kT>(int(std::min<int64_t>(kT, n - t)), [&](auto tokens) {
            GemmTile<V, decltype(tokens)::value, 2>(xt, widened, len, c_block == 0, y + t * ldy + row0, ldy,
                                                     b.rows_valid);
          });
        }
      }
      if constexpr (kFp8) xb = xp + GemmPackedIndex(n, 0, c_block);
    }
  }
}

template <class V>
void MatMulPanelsPacked(const float* x, const float* xp, float* scratch, int64_t n, const WeightMatrix& w,
                        int64_t panel_begin, int64_t panel_end, float* y, int64_t ldy) {
  if (w.format == WeightFormat::kFp8Block && w.block_rows % (2 * V::kLanes) != 0) {
    return MatMulPanels<V>(x, n, w, panel_begin, panel_end, y, ldy);
  }
  if (w.quantized()) {
    return WithQuantPanels<V>(w, [&](const auto& k) {
      MatMulPanelBlocksPacked<V>(k, xp, scratch, n, panel_begin, panel_end, y, ldy);
    });
  }
  WithWeightDType(w.dtype, [&](auto d) {
    MatMulPanelBlocksPacked<V>(DensePanels<V, decltype(d)::value>{w}, xp, scratch, n, panel_begin, panel_end, y,
                               ldy);
  });
}

template <class V, DType D>
void AxpyRowTyped(float a, const std::byte* row, int64_t cols, float* y) {
  const typename V::Reg av = V::Broadcast(a);
  int64_t c = 0;
  for (; c + V::kLanes <= cols; c += V::kLanes) {
    V::StoreF32(y + c, V::Fma(av, V::template LoadW<D>(row + c * kWeightBytes<D>), V::LoadF32(y + c)));
  }
  for (; c < cols; ++c) y[c] += a * LoadAsF32<D>(row + c * kWeightBytes<D>);
}

template <class V>
void AxpyRow(float a, const WeightMatrix& w, int64_t r, float* y) {
  if (w.quantized()) {
    return WithQuantFormat(w.format, [&](auto f) { AxpyRowQuant<V, decltype(f)::value>(a, w, r, y); });
  }
  WithWeightDType(w.dtype, [&](auto d) { AxpyRowTyped<V, decltype(d)::value>(a, w.row(r), w.cols, y); });
}

template <class V>
float DotF32(const float* a, const float* b, int64_t n) {
  typename V::Reg acc0 = V::Zero(), acc1 = V::Zero();
  int64_t i = 0;
  for (; i + 2 * V::kLanes <= n; i += 2 * V::kLanes) {
    acc0 = V::Fma(V::LoadF32(a + i), V::LoadF32(b + i), acc0);
    acc1 = V::Fma(V::LoadF32(a + i + V::kLanes), V::LoadF32(b + i + V::kLanes), acc1);
  }
  for (; i + V::kLanes <= n; i += V::kLanes) acc0 = V::Fma(V::LoadF32(a + i), V::LoadF32(b + i), acc0);
  float sum = V::Sum(V::Add(acc0, acc1));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

template <class V>
void AxpyF32(float a, const float* x, float* y, int64_t n) {
  const typename V::Reg av = V::Broadcast(a);
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    V::StoreF32(y + i, V::Fma(av, V::LoadF32(x + i), V::LoadF32(y + i)));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

template <class V>
void ScaleAddF32(float b, const float* x, float* y, int64_t n) {
  const typename V::Reg bv = V::Broadcast(b);
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    V::StoreF32(y + i, V::Fma(V::LoadF32(y + i), bv, V::LoadF32(x + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(y[i], b, x[i]);
}

// acc = acc * b + a converges to a / (1 - b) = 1 with a = 1 - b: no overflow, no denormals.
template <class V>
double FmaChains(int64_t iterations, float* sink) {
  const typename V::Reg b = V::Broadcast(*sink), a = V::Broadcast(1.0f - *sink);
  typename V::Reg acc[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) acc[j] = V::Broadcast(float(j));
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kFmaChains; ++j) acc[j] = V::Fma(acc[j], b, a);
  }
  typename V::Reg sum = V::Zero();
  for (int j = 0; j < kFmaChains; ++j) sum = V::Add(sum, acc[j]);
  *sink = V::Sum(sum);
  return 2.0 * double(V::kLanes) * kFmaChains * double(iterations);
}

}  // namespace mlaserve::MLASERVE_SIMD_NS
