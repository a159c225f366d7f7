// The reference kernel table: plain loops, no intrinsics. Every SIMD table must agree with it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "kernels/weight_value.h"

namespace mlaserve {
namespace {

void MatMulRows(const float* x, int64_t n, const WeightMatrix& w, int64_t row_begin,
                int64_t row_end, float* y, int64_t ldy) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = x + t * w.cols;
      float sum = 0.0f;
      for (int64_t c = 0; c < w.cols; ++c) sum += xt[c] * WeightAt(w, r, c);
      y[t * ldy + r] = sum;
    }
  }
}

void MatMulPanels(const float* x, int64_t n, const WeightMatrix& w, int64_t panel_begin,
                  int64_t panel_end, float* y, int64_t ldy) {
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    const int64_t rows = std::min<int64_t>(kPanelRows, w.rows - p * kPanelRows);
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = x + t * w.cols;
      for (int64_t i = 0; i < rows; ++i) {
        float sum = 0.0f;
        for (int64_t c = 0; c < w.cols; ++c) {
          sum += xt[c] * WeightAt(w, p * kPanelRows + i, c);
        }
        y[t * ldy + p * kPanelRows + i] = sum;
      }
    }
  }
}

void AxpyRow(float a, const WeightMatrix& w, int64_t r, float* y) {
  for (int64_t c = 0; c < w.cols; ++c) y[c] += a * WeightAt(w, r, c);
}

float DotF32(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void AxpyF32(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void ScaleAddF32(float b, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(y[i], b, x[i]);
}

// Plain floats, eight per chain: whatever the baseline ISA's compiler makes of them (SSE2 mul and
// add on x86-64) is the portable table's peak.
double FmaChains(int64_t iterations, float* sink) {
  constexpr int kWidth = 8;
  const float b = *sink, a = 1.0f - *sink;
  float acc[kFmaChains * kWidth];
  for (int j = 0; j < kFmaChains * kWidth; ++j) acc[j] = float(j / kWidth);
  for (int64_t i = 0; i < iterations; ++i) {
    for (float& v : acc) v = v * b + a;
  }
  float sum = 0.0f;
  for (float v : acc) sum += v;
  *sink = sum;
  return 2.0 * kWidth * kFmaChains * double(iterations);
}

void GemmF32(const float* x, int64_t ldx, const float* b, int64_t ldb, float* y, int64_t ldy, int64_t n, int64_t k,
             int64_t m, bool accumulate) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < m; ++j) {
      float sum = accumulate ? y[t * ldy + j] : 0.0f;
      for (int64_t i = 0; i < k; ++i) sum += x[t * ldx + i] * b[i * ldb + j];
      y[t * ldy + j] = sum;
    }
  }
}

float ScaleMax(float* x, int64_t n, float scale) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i] *= scale);
  return m;
}

// The reference of KernelSet::softmax_columns: std::exp, each column's rows in order.
void SoftmaxColumns(float* s, int64_t n, int64_t hp, float scale, float* run_max, float* run_sum, float* corr) {
  for (int64_t h = 0; h < hp; ++h) {
    float m = run_max[h];
    for (int64_t r = 0; r < n; ++r) m = std::max(m, s[r * hp + h] * scale);
    corr[h] = std::exp(run_max[h] + -m);
    float sum = run_sum[h] * corr[h];
    for (int64_t r = 0; r < n; ++r) {
      s[r * hp + h] = std::exp(s[r * hp + h] * scale + -m);
      sum += s[r * hp + h];
    }
    run_max[h] = m;
    run_sum[h] = sum;
  }
}

float ExpSum(float* x, int64_t n, float shift) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

// The layout's definition, element by element (the SIMD tables' packing is compared with it).
void PackActivations(const float* x, int64_t n, const WeightMatrix& w, int64_t tile_begin, int64_t tile_end,
                     float* xp) {
  const int64_t cols = w.cols;
  for (int64_t t = tile_begin * kGemmTileTokens; t < std::min(n, tile_end * kGemmTileTokens); ++t) {
    for (int64_t c = 0; c < cols; ++c) xp[GemmPackedIndex(n, t, c)] = x[t * cols + c];
  }
}

// The reference product reads the activations as they are.
void MatMulPanelsPacked(const float* x, const float*, float*, int64_t n, const WeightMatrix& w,
                        int64_t panel_begin, int64_t panel_end, float* y, int64_t ldy) {
  MatMulPanels(x, n, w, panel_begin, panel_end, y, ldy);
}

// The residual add, then ops.cc's RmsNorm (sums of squares in double, in index order).
void AddRmsNorm(float* x, const float* add, const float* weight, int64_t dim, double eps, float* out) {
  for (int64_t i = 0; i < dim; ++i) x[i] += add[i];
  RmsNorm(x, weight, dim, eps, out);
}

}  // namespace

const KernelSet& PortableKernels() {
  static const KernelSet kSet{KernelIsa::kPortable, "portable", MatMulRows, MatMulPanels, AxpyRow,
                              DotF32, AxpyF32, FmaChains, PackActivations, MatMulPanelsPacked,
                              RmsNorm, AddRmsNorm, SiluMul, GemmF32, ExpSum, ScaleMax, SoftmaxColumns, ScaleAddF32};
  return kSet;
}

}  // namespace mlaserve
