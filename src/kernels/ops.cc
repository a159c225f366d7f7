#include "kernels/ops.h"

#include <algorithm>
#include <cmath>

namespace mlaserve {

namespace {

// Products of packed matrices split by pairs of panels (an AVX-512 block), at least ~64 KB of
// weights a chunk.
int64_t PanelGrain(const WeightMatrix& w) {
  const int64_t panels = std::max<int64_t>(2, (64 << 10) / std::max<size_t>(1, w.panel_bytes()));
  return (panels + 1) / 2 * 2;
}

}  // namespace

void MatMul(const ComputeContext& ctx, const float* x, int64_t n, const WeightMatrix& w, float* y) {
  const KernelSet& k = *ctx.kernels;
  if (w.packed) {
    const int64_t grain = PanelGrain(w);
    const int64_t chunks = (w.num_panels() + grain - 1) / grain;
    ctx.pool->ParallelFor(chunks, 1, [&](int64_t begin, int64_t end) {
      k.matmul_panels(x, n, w, begin * grain, std::min(w.num_panels(), end * grain), y, w.rows);
    });
    return;
  }
  // Each chunk should move at least ~64 KB of weights so that the dispatch cost stays small.
  const int64_t grain = std::max<int64_t>(4, (64 << 10) / std::max<int64_t>(1, w.row_bytes()));
  ctx.pool->ParallelFor(w.rows, (grain + 3) / 4 * 4, [&](int64_t begin, int64_t end) {
    k.matmul_rows(x, n, w, begin, end, y, w.rows);
  });
}

void MatMulPair(const ComputeContext& ctx, const float* x, int64_t n, const WeightMatrix& w1,
                const WeightMatrix& w2, float* y1, float* y2) {
  const KernelSet& k = *ctx.kernels;
  if (w1.packed && w2.packed) {
    const int64_t grain = PanelGrain(w1);
    const int64_t chunks1 = (w1.num_panels() + grain - 1) / grain;
    const int64_t chunks2 = (w2.num_panels() + grain - 1) / grain;
    ctx.pool->ParallelFor(chunks1 + chunks2, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const bool first = c < chunks1;
        const WeightMatrix& w = first ? w1 : w2;
        const int64_t cc = first ? c : c - chunks1;
        k.matmul_panels(x, n, w, cc * grain, std::min(w.num_panels(), (cc + 1) * grain), first ? y1 : y2, w.rows);
      }
    });
    return;
  }
  const int64_t grain = std::max<int64_t>(4, (64 << 10) / std::max<int64_t>(1, w1.row_bytes()));
  // Rows [0, w1.rows) are w1's, the rest w2's; a chunk never straddles the two.
  const int64_t chunk = (grain + 3) / 4 * 4;
  const int64_t chunks1 = (w1.rows + chunk - 1) / chunk, chunks2 = (w2.rows + chunk - 1) / chunk;
  ctx.pool->ParallelFor(chunks1 + chunks2, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      if (c < chunks1) {
        k.matmul_rows(x, n, w1, c * chunk, std::min(w1.rows, (c + 1) * chunk), y1, w1.rows);
      } else {
        const int64_t c2 = c - chunks1;
        k.matmul_rows(x, n, w2, c2 * chunk, std::min(w2.rows, (c2 + 1) * chunk), y2, w2.rows);
      }
    }
  });
}

void RmsNorm(const float* x, const float* weight, int64_t dim, double eps, float* out) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < dim; ++i) sum_sq += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(sum_sq / double(dim) + eps));
  for (int64_t i = 0; i < dim; ++i) out[i] = x[i] * inv * weight[i];
}

void SiluMul(const float* gate, const float* up, int64_t inter, float* out) {
  for (int64_t i = 0; i < inter; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void Softmax(std::span<float> x) {
  if (x.empty()) return;
  const float max = *std::max_element(x.begin(), x.end());
  double sum = 0.0;
  for (float& v : x) {
    v = std::exp(v - max);
    sum += v;
  }
  const float inv = float(1.0 / sum);
  for (float& v : x) v *= inv;
}

}  // namespace mlaserve
