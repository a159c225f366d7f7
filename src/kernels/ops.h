// The operations the model is built from, over fp32 activations. Matrix products run on the
// thread pool through the selected kernel table; the small element-wise ops run on the calling
// thread. None of them allocates.
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace mlaserve {

// What a forward pass computes with: the kernel table, the threads, and scratch for a prefill
// matmul (the packed activations and each thread's own block; empty, or too small for a
// product's GemmScratchFloats: that product reads the activations unpacked). Borrowed, not
// owned; the scratch is overwritten by every MatMul / MatMulPair call.
struct ComputeContext {
  const KernelSet* kernels;
  ThreadPool* pool;
  std::span<float> gemm_scratch = {};
};

// Scratch floats a prefill product of n tokens x cols columns needs on num_threads threads.
inline constexpr int64_t GemmScratchFloats(int64_t n, int64_t cols, int num_threads) {
  return PackedActivationFloats(n, cols) + num_threads * GemmThreadScratchFloats(n);
}

// Panels per chunk of n tokens' product with a packed matrix through table k, on num_threads
// threads; even, at least 2. packed_input: the product reads packed activations (PackedProductPays
// and the scratch there): then chunks are prefill's blocks of rows, except for an int8 table's
// product of one token tile, which streams its weights as decode does.
int64_t PanelGrain(const KernelSet& k, int64_t n, const WeightMatrix& w, bool packed_input, int num_threads);
// Floats pack_activations writes for n tokens' product with w, with this table.
int64_t PackedFloatsFor(const KernelSet& k, int64_t n, const WeightMatrix& w);

// Whether n tokens' product with w is faster through the packed-activation product
// (pack_activations + matmul_panels_packed) than through matmul_panels, with this table
// (KernelSet::packed_min_tokens).
bool PackedProductPays(const KernelSet& k, int64_t n, const WeightMatrix& w);

// y[n, w.rows] = x[n, w.cols] @ W^T, split over the pool by output rows.
void MatMul(const ComputeContext& ctx, const float* x, int64_t n, const WeightMatrix& w, float* y);

// y1 = x @ w1^T and y2 = x @ w2^T in one pass over the pool (an MLP's gate and up projections:
// one dispatch instead of two). w1 and w2 have the same cols.
void MatMulPair(const ComputeContext& ctx, const float* x, int64_t n, const WeightMatrix& w1,
                const WeightMatrix& w2, float* y1, float* y2);

// out[i] = x[i] / rms(x) * weight[i], i < dim. x and out may alias.
void RmsNorm(const float* x, const float* weight, int64_t dim, double eps, float* out);

// gate_up[t] = [gate | up] (each `inter` wide) -> out[t] = silu(gate) * up.
void SiluMul(const float* gate, const float* up, int64_t inter, float* out);

// In place: x = softmax(x).
void Softmax(std::span<float> x);

}  // namespace mlaserve
