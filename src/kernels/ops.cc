#include "kernels/ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>

namespace mlaserve {

namespace {

// Whether x @ w^T goes through the packed-activation product: many tokens and room in the
// scratch (ComputeContext::gemm_scratch).
bool UsePackedProduct(const ComputeContext& ctx, int64_t n, const WeightMatrix& w) {
  return PackedProductPays(*ctx.kernels, n, w) &&
         int64_t(ctx.gemm_scratch.size()) >= GemmScratchFloats(n, w.cols, ctx.pool->num_threads());
}

void PackInParallel(const ComputeContext& ctx, const float* x, int64_t n, const WeightMatrix& w) {
  if (GemmTiles(n) == 1) {
    // One tile (an int8 table's decode product): packed here, without a round trip to the pool.
    ctx.kernels->pack_activations(x, n, w, 0, 1, ctx.gemm_scratch.data());
    return;
  }
  ctx.pool->ParallelFor(GemmTiles(n), 1, [&](int64_t begin, int64_t end) {
    ctx.kernels->pack_activations(x, n, w, begin, end, ctx.gemm_scratch.data());
  });
}

// One chunk of a packed matrix's product: panels [chunk * grain, ...) of w. thread: the
// calling thread's index (its scratch), for the packed-activation product.
void PanelChunk(const ComputeContext& ctx, const float* x, int64_t n, const WeightMatrix& w, int64_t grain,
                int64_t chunk, bool packed_input, int thread, float* y) {
  const int64_t begin = chunk * grain, end = std::min(w.num_panels(), (chunk + 1) * grain);
  if (packed_input) {
    float* xp = ctx.gemm_scratch.data();
    float* scratch = xp + PackedActivationFloats(n, w.cols) + thread * GemmThreadScratchFloats(n);
    ctx.kernels->matmul_panels_packed(x, xp, scratch, n, w, begin, end, y, w.rows);
  } else {
    ctx.kernels->matmul_panels(x, n, w, begin, end, y, w.rows);
  }
}

// Runs chunk(c, thread) for c in [0, chunks) over the pool, each thread taking the next chunk
// as it finishes one (so a thread knows its index, for its scratch).
void ForEachChunk(const ComputeContext& ctx, int64_t chunks, FunctionRef<void(int64_t, int)> chunk) {
  std::atomic<int64_t> next{0};
  ctx.pool->RunOnAll([&](int thread) {
    for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next.fetch_add(1, std::memory_order_relaxed)) {
      chunk(c, thread);
    }
  });
}

}  // namespace

namespace {
bool Bf16Product(const KernelSet& k, int64_t n, const WeightMatrix& w) {
  const int min_tokens = w.quantized() ? Bf16CodesMinTokens(k.bf16_min_tokens) : k.bf16_min_tokens;
  return min_tokens > 0 && n >= min_tokens && Bf16DotMultiplies(w);
}
bool Int8Product(const KernelSet& k, const WeightMatrix& w) { return k.int8_dot && Int8DotMultiplies(w); }
}  // namespace

int64_t PackedFloatsFor(const KernelSet& k, int64_t n, const WeightMatrix& w) {
  if (Int8Product(k, w)) return Int8PackedActivationFloats(n, w.cols, w.block_cols);
  return Bf16Product(k, n, w) ? Bf16PackedActivationFloats(n, w.cols) : PackedActivationFloats(n, w.cols);
}

bool PackedProductPays(const KernelSet& k, int64_t n, const WeightMatrix& w) {
  if (!w.packed) return false;
  // int8: the activations are quantized once per product, not in every chunk of panels.
  if (Int8Product(k, w)) return n >= 1;
  return n >= (Bf16Product(k, n, w) ? k.bf16_packed_min_tokens : k.packed_min_tokens);
}

// Products of packed matrices split by pairs of panels (an AVX-512 block). Reading the weights
// once (decode, small batches), a chunk is a run of consecutive panels, one sequential stream of
// memory: as long as two chunks per thread allow, from ~64 KB up to ~1 MB of weights (chunks of
// ~128 KB, taken alternately by the threads, broke each thread's reads into short runs: 8-request
// decode ran ~20% slower, `bench --batch 8`). A prefill's (the packed-activation product) chunk is
// instead a block of output rows whose partial sums [n, rows] stay in L2 across the column
// blocks: up to 16 panels (256 rows), fewer when that would leave a thread without work.
int64_t PanelGrain(const KernelSet& k, int64_t n, const WeightMatrix& w, bool packed_input, int num_threads) {
  // An int8 product of a few tokens reads packed activations but streams its weights as decode.
  const bool prefill = packed_input && (!Int8Product(k, w) || n > kGemmTileTokens);
  const int64_t per_thread = w.num_panels() / (2 * int64_t(num_threads));
  int64_t panels;
  if (prefill) {
    panels = std::clamp<int64_t>(per_thread, 2, 16);
  } else {
    const int64_t panel_bytes = int64_t(std::max<size_t>(1, w.panel_bytes()));
    const int64_t least = std::max<int64_t>(2, (64 << 10) / panel_bytes);
    panels = std::clamp<int64_t>(per_thread, least, std::max(least, (1 << 20) / panel_bytes));
  }
  return (panels + 1) / 2 * 2;
}

void MatMul(const ComputeContext& ctx, const float* x, int64_t n, const WeightMatrix& w, float* y) {
  const KernelSet& k = *ctx.kernels;
  if (w.packed) {
    const bool packed_input = UsePackedProduct(ctx, n, w);
    if (packed_input) PackInParallel(ctx, x, n, w);
    const int64_t grain = PanelGrain(k, n, w, packed_input, ctx.pool->num_threads());
    const int64_t chunks = (w.num_panels() + grain - 1) / grain;
    if (packed_input) {
      ForEachChunk(ctx, chunks, [&](int64_t c, int thread) { PanelChunk(ctx, x, n, w, grain, c, true, thread, y); });
    } else {
      ctx.pool->ParallelFor(chunks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) PanelChunk(ctx, x, n, w, grain, c, false, 0, y);
      });
    }
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
    // One packing serves both (same x, same cols, and the same layout: SharePackedActivations).
    const bool packed_input = UsePackedProduct(ctx, n, w1) && UsePackedProduct(ctx, n, w2) &&
                              SharePackedActivations(w1, w2);
    if (packed_input) PackInParallel(ctx, x, n, w1);
    const int64_t grain = PanelGrain(k, n, w1, packed_input, ctx.pool->num_threads());
    const int64_t chunks1 = (w1.num_panels() + grain - 1) / grain;
    const int64_t chunks2 = (w2.num_panels() + grain - 1) / grain;
    const auto chunk = [&](int64_t c, int thread) {
      if (c < chunks1) {
        PanelChunk(ctx, x, n, w1, grain, c, packed_input, thread, y1);
      } else {
        PanelChunk(ctx, x, n, w2, grain, c - chunks1, packed_input, thread, y2);
      }
    };
    if (packed_input) {
      ForEachChunk(ctx, chunks1 + chunks2, chunk);
    } else {
      ctx.pool->ParallelFor(chunks1 + chunks2, 1, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) chunk(c, 0);
      });
    }
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
