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
// nibbles, lane 2j low in byte j -> nibble - 8); Mul; Fma(a, b, acc) = a*b+acc; Sum(Reg);
// StoreF32(float*, Reg).

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

// Writes T tokens x two output vectors of a panel block: rows_valid of the 2 * kLanes rows.
template <class V, int T>
inline void StorePanelOutputs(const typename V::Reg (&acc)[T][2], float* y, int64_t ldy, int rows_valid) {
  for (int t = 0; t < T; ++t) {
    if (rows_valid == 2 * V::kLanes) {
      V::StoreF32(y + t * ldy, acc[t][0]);
      V::StoreF32(y + t * ldy + V::kLanes, acc[t][1]);
    } else {
      float out[2 * V::kLanes];
      V::StoreF32(out, acc[t][0]);
      V::StoreF32(out + V::kLanes, acc[t][1]);
      for (int i = 0; i < rows_valid; ++i) y[t * ldy + i] = out[i];
    }
  }
}

// ---- Quantized weights (fp8 block-scaled, int4 grouped) ------------------------------------
// The codes are widened in registers and multiplied by their block's scale (one vector multiply
// per weight vector, shared by every token; fp8 panels fold the scale into the activations
// instead, see Fp8PanelBlock), then summed in the same order as the dense kernels.

// LoadFp8 reinterprets E4M3 as fp16 (exponent field shifted in place), which is value / 256.
inline constexpr float kFp8LoadScale = 256.0f;

template <class V, WeightFormat F>
inline typename V::Reg LoadCodes(const std::byte* p) {
  if constexpr (F == WeightFormat::kFp8Block) return V::LoadFp8(p);
  else return V::LoadInt4(p);
}

// Bytes of one panel column (16 lanes) and the byte offset of lane `lane` (a multiple of 8).
template <WeightFormat F>
constexpr int64_t kPanelColumnBytes = F == WeightFormat::kFp8Block ? kPanelRows : kPanelRows / 2;
template <WeightFormat F>
constexpr int64_t LaneByteOffset(int64_t lane) { return F == WeightFormat::kFp8Block ? lane : lane / 2; }
// Bytes of kLanes consecutive codes of a row-major row.
template <WeightFormat F>
constexpr int64_t RowByteOffset(int64_t c) { return F == WeightFormat::kFp8Block ? c : c / 2; }

// The scale vector of the kLanes packed rows from `row` (a multiple of kLanes), column group g.
template <class V, WeightFormat F>
inline typename V::Reg PanelScale(const WeightMatrix& w, int64_t row, int64_t g) {
  if constexpr (F == WeightFormat::kFp8Block) {
    return V::Broadcast(LoadF32Unaligned(w.scales, size_t((row / w.block_rows) * w.scale_cols() + g)) * kFp8LoadScale);
  } else {
    const auto* s = static_cast<const std::byte*>(w.scales) +
                    size_t(((row / kPanelRows) * w.scale_cols() + g) * kPanelRows + row % kPanelRows) * 2;
    return V::template LoadW<DType::kBF16>(s);
  }
}

// Two vectors of outputs (rows row0 .. row0 + 2 * kLanes; the second absent past the range) for T
// tokens, over every column.
template <class V, WeightFormat F, int T>
inline void QuantPanelBlock(const float* x, const WeightMatrix& w, int64_t row0, bool has_second, float* y,
                            int64_t ldy, int rows_valid) {
  constexpr int64_t kStep = kPanelColumnBytes<F>;
  const int64_t row1 = row0 + V::kLanes;
  const std::byte* w0 = w.panel(row0 / kPanelRows) + LaneByteOffset<F>(row0 % kPanelRows);
  const std::byte* w1 = has_second ? w.panel(row1 / kPanelRows) + LaneByteOffset<F>(row1 % kPanelRows) : nullptr;
  const int64_t cols = w.cols;
  typename V::Reg acc[T][2];
  for (int t = 0; t < T; ++t) acc[t][0] = acc[t][1] = V::Zero();
  for (int64_t g = 0, c = 0; c < cols; ++g) {
    const typename V::Reg s0 = PanelScale<V, F>(w, row0, g);
    const typename V::Reg s1 = has_second ? PanelScale<V, F>(w, row1, g) : V::Zero();
    const int64_t group_end = std::min<int64_t>(cols, c + w.block_cols);
    for (; c < group_end; ++c) {
      const typename V::Reg a = V::Mul(LoadCodes<V, F>(w0 + c * kStep), s0);
      const typename V::Reg b = has_second ? V::Mul(LoadCodes<V, F>(w1 + c * kStep), s1) : V::Zero();
      for (int t = 0; t < T; ++t) {
        const typename V::Reg xv = V::Broadcast(x[t * cols + c]);
        acc[t][0] = V::Fma(xv, a, acc[t][0]);
        acc[t][1] = V::Fma(xv, b, acc[t][1]);
      }
    }
  }
  StorePanelOutputs<V, T>(acc, y, ldy, rows_valid);
}


// fp8 panels whose two output vectors share one scale per column block (block_rows a multiple
// of 2 * kLanes): the scale is folded into the activations instead, x[t][c] * scale computed once
// per (token, column) into a small buffer, so the inner loop is the dense one (widen, FMA) with no
// per-weight multiply. Each output is still summed over c in order, whatever T.
template <class V, int T>
inline void Fp8PanelBlock(const float* x, const WeightMatrix& w, int64_t row0, bool has_second, float* y,
                          int64_t ldy, int rows_valid) {
  constexpr int64_t kChunk = 128;  // columns of scaled activations buffered at a time
  constexpr int64_t kStep = kPanelColumnBytes<WeightFormat::kFp8Block>;
  const int64_t row1 = row0 + V::kLanes;
  const std::byte* w0 = w.panel(row0 / kPanelRows) + row0 % kPanelRows;
  const std::byte* w1 = has_second ? w.panel(row1 / kPanelRows) + row1 % kPanelRows : nullptr;
  const int64_t cols = w.cols;
  alignas(64) float xs[T * kChunk];
  typename V::Reg acc[T][2];
  for (int t = 0; t < T; ++t) acc[t][0] = acc[t][1] = V::Zero();
  for (int64_t g = 0, c = 0; c < cols; ++g) {
    const float scale =
        LoadF32Unaligned(w.scales, size_t((row0 / w.block_rows) * w.scale_cols() + g)) * kFp8LoadScale;
    const int64_t group_end = std::min<int64_t>(cols, c + w.block_cols);
    while (c < group_end) {
      const int64_t len = std::min(kChunk, group_end - c);
      const typename V::Reg sv = V::Broadcast(scale);
      for (int t = 0; t < T; ++t) {
        int64_t i = 0;
        for (; i + V::kLanes <= len; i += V::kLanes) {
          V::StoreF32(xs + t * kChunk + i, V::Mul(V::LoadF32(x + t * cols + c + i), sv));
        }
        for (; i < len; ++i) xs[t * kChunk + i] = x[t * cols + c + i] * scale;
      }
      for (int64_t i = 0; i < len; ++i, ++c) {
        const typename V::Reg a = V::LoadFp8(w0 + c * kStep);
        const typename V::Reg b = has_second ? V::LoadFp8(w1 + c * kStep) : V::Zero();
        for (int t = 0; t < T; ++t) {
          const typename V::Reg xv = V::Broadcast(xs[t * kChunk + i]);
          acc[t][0] = V::Fma(xv, a, acc[t][0]);
          acc[t][1] = V::Fma(xv, b, acc[t][1]);
        }
      }
    }
  }
  StorePanelOutputs<V, T>(acc, y, ldy, rows_valid);
}

template <class V, WeightFormat F, int T>
inline void QuantPanelDispatch(bool fold_scale, const float* x, const WeightMatrix& w, int64_t row0, bool has_second,
                               float* y, int64_t ldy, int rows_valid) {
  if constexpr (F == WeightFormat::kFp8Block) {
    if (fold_scale) return Fp8PanelBlock<V, T>(x, w, row0, has_second, y, ldy, rows_valid);
  }
  QuantPanelBlock<V, F, T>(x, w, row0, has_second, y, ldy, rows_valid);
}

template <class V, WeightFormat F, int T>
inline void QuantPanelTail(bool fold_scale, int left, const float* x, const WeightMatrix& w, int64_t row0,
                           bool has_second, float* y, int64_t ldy, int rows_valid) {
  if constexpr (T > 0) {
    if (left == T) return QuantPanelDispatch<V, F, T>(fold_scale, x, w, row0, has_second, y, ldy, rows_valid);
    QuantPanelTail<V, F, T - 1>(fold_scale, left, x, w, row0, has_second, y, ldy, rows_valid);
  }
}

template <class V, WeightFormat F>
void MatMulPanelsQuant(const float* x, int64_t n, const WeightMatrix& w, int64_t panel_begin,
                       int64_t panel_end, float* y, int64_t ldy) {
  constexpr int kT = V::kPanelTokens;
  constexpr int kBlockRows = 2 * V::kLanes;
  constexpr int kPanelsPerBlock = kBlockRows / kPanelRows;  // 2 (AVX-512) or 1 (AVX2)
  // Panel pairs start at even panels, so both vectors of a block share their scale row.
  const bool fold_scale = w.block_rows % kBlockRows == 0 && panel_begin % kPanelsPerBlock == 0;
  for (int64_t p = panel_begin; p < panel_end; p += kPanelsPerBlock) {
    const bool has_second = kPanelsPerBlock == 1 || p + 1 < panel_end;
    const int64_t row0 = p * kPanelRows;
    const int rows_valid = int(std::min<int64_t>(has_second ? kBlockRows : kPanelRows, w.rows - row0));
    int64_t t = 0;
    for (; t + kT <= n; t += kT) {
      QuantPanelDispatch<V, F, kT>(fold_scale, x + t * w.cols, w, row0, has_second, y + t * ldy + row0, ldy,
                                   rows_valid);
    }
    QuantPanelTail<V, F, kT - 1>(fold_scale, int(n - t), x + t * w.cols, w, row0, has_second, y + t * ldy + row0,
                                 ldy, rows_valid);
  }
}

// Row-major quantized rows (kv_b_proj, read by rows): vectors need whole groups of kLanes.
template <class V, WeightFormat F>
inline typename V::Reg RowScale(const WeightMatrix& w, int64_t r, int64_t c) {
  return V::Broadcast(WeightScaleAt(w, r, c) * (F == WeightFormat::kFp8Block ? kFp8LoadScale : 1.0f));
}

template <class V, WeightFormat F>
float DotRowQuant(const float* x, const WeightMatrix& w, int64_t r) {
  const std::byte* row = w.row(r);
  typename V::Reg acc = V::Zero();
  int64_t c = 0;
  while (c + V::kLanes <= w.cols) {
    const typename V::Reg s = RowScale<V, F>(w, r, c);
    const int64_t group_end = std::min<int64_t>(w.cols, (c / w.block_cols + 1) * w.block_cols);
    for (; c + V::kLanes <= group_end; c += V::kLanes) {
      acc = V::Fma(V::LoadF32(x + c), V::Mul(LoadCodes<V, F>(row + RowByteOffset<F>(c)), s), acc);
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
  int64_t c = 0;
  while (c + V::kLanes <= w.cols) {
    const typename V::Reg s = V::Mul(V::Broadcast(a), RowScale<V, F>(w, r, c));
    const int64_t group_end = std::min<int64_t>(w.cols, (c / w.block_cols + 1) * w.block_cols);
    for (; c + V::kLanes <= group_end; c += V::kLanes) {
      V::StoreF32(y + c, V::Fma(s, LoadCodes<V, F>(row + RowByteOffset<F>(c)), V::LoadF32(y + c)));
    }
    if (c < group_end) break;
  }
  for (; c < w.cols; ++c) y[c] += a * WeightAt(w, r, c);
}

// Calls fn(std::integral_constant<WeightFormat, F>{}) for a quantized matrix's format.
template <class Fn>
inline void WithQuantFormat(WeightFormat format, Fn&& fn) {
  if (format == WeightFormat::kFp8Block) return fn(std::integral_constant<WeightFormat, WeightFormat::kFp8Block>{});
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

// Packed panels: for each column c, the 16 weights of a panel row are loaded as vectors and
// multiplied by x[t][c] broadcast, accumulating 16 outputs per vector with no horizontal sums.
// Each output is summed over c in order, whatever T, so results are batch-invariant.
// A block covers 2 vectors of outputs (two panels on AVX-512, one on AVX2) for T tokens.
template <class V, DType D, int T>
inline void PanelBlock(const float* x, int64_t cols, const std::byte* w0, const std::byte* w1,
                       int64_t step_bytes, float* y, int64_t ldy, int rows_valid) {
  typename V::Reg acc[T][2];
  for (int t = 0; t < T; ++t) acc[t][0] = acc[t][1] = V::Zero();
  for (int64_t c = 0; c < cols; ++c) {
    const typename V::Reg a = V::template LoadW<D>(w0 + c * step_bytes);
    const typename V::Reg b = w1 != nullptr ? V::template LoadW<D>(w1 + c * step_bytes) : V::Zero();
    for (int t = 0; t < T; ++t) {
      const typename V::Reg xv = V::Broadcast(x[t * cols + c]);
      acc[t][0] = V::Fma(xv, a, acc[t][0]);
      acc[t][1] = V::Fma(xv, b, acc[t][1]);
    }
  }
  StorePanelOutputs<V, T>(acc, y, ldy, rows_valid);
}

template <class V, DType D, int T>
inline void PanelTail(int left, const float* x, int64_t cols, const std::byte* w0, const std::byte* w1,
                      int64_t step_bytes, float* y, int64_t ldy, int rows_valid) {
  if constexpr (T > 0) {
    if (left == T) return PanelBlock<V, D, T>(x, cols, w0, w1, step_bytes, y, ldy, rows_valid);
    PanelTail<V, D, T - 1>(left, x, cols, w0, w1, step_bytes, y, ldy, rows_valid);
  }
}

template <class V, DType D>
void MatMulPanelsTyped(const float* x, int64_t n, const WeightMatrix& w, int64_t panel_begin,
                       int64_t panel_end, float* y, int64_t ldy) {
  constexpr int kT = V::kPanelTokens;
  constexpr int64_t kValueBytes = kWeightBytes<D>;
  // Rows a block covers: two vectors of outputs.
  constexpr int kBlockRows = 2 * V::kLanes;
  constexpr int kPanelsPerBlock = kBlockRows / kPanelRows;  // 2 (AVX-512) or 1 (AVX2)
  for (int64_t p = panel_begin; p < panel_end; p += kPanelsPerBlock) {
    const std::byte* w0 = w.panel(p);
    const std::byte* w1;
    if constexpr (kPanelsPerBlock == 2) {
      w1 = p + 1 < panel_end ? w.panel(p + 1) : nullptr;
    } else {
      w1 = w0 + V::kLanes * kValueBytes;  // the panel row's second vector
    }
    const int64_t row0 = p * kPanelRows;
    const int rows_valid = int(std::min<int64_t>(w1 != nullptr ? kBlockRows : kPanelRows, w.rows - row0));
    const int64_t step = kPanelRows * kValueBytes;
    int64_t t = 0;
    for (; t + kT <= n; t += kT) {
      PanelBlock<V, D, kT>(x + t * w.cols, w.cols, w0, w1, step, y + t * ldy + row0, ldy, rows_valid);
    }
    PanelTail<V, D, kT - 1>(int(n - t), x + t * w.cols, w.cols, w0, w1, step, y + t * ldy + row0, ldy,
                            rows_valid);
  }
}

template <class V>
void MatMulPanels(const float* x, int64_t n, const WeightMatrix& w, int64_t panel_begin,
                  int64_t panel_end, float* y, int64_t ldy) {
  if (w.quantized()) {
    return WithQuantFormat(w.format, [&](auto f) { MatMulPanelsQuant<V, decltype(f)::value>(x, n, w, panel_begin, panel_end, y, ldy); });
  }
  WithWeightDType(w.dtype, [&](auto d) { MatMulPanelsTyped<V, decltype(d)::value>(x, n, w, panel_begin, panel_end, y, ldy); });
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

}  // namespace mlaserve::MLASERVE_SIMD_NS
