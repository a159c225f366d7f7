// The fp32 product of activations and a row-major fp32 matrix, y (+)= x @ b, for attention's
// scores (queries @ keys^T) and outputs (probabilities @ values). Written once over the vector
// traits V of simd_kernels_impl.h; include right after it, from the ISA files only.
//
// A block keeps T rows of y by NV vectors of columns in registers and walks i in order, one
// broadcast of x[t][i] times NV vectors of b's row i per step: no horizontal sums, and every
// output sums i in order whatever n and m are.

#ifndef MLASERVE_SIMD_NS
#error "define MLASERVE_SIMD_NS before including gemm_f32_impl.h"
#endif

namespace mlaserve::MLASERVE_SIMD_NS {

template <class V, int T, int NV>
inline void GemmBlock(const float* x, int64_t ldx, const float* b, int64_t ldb, float* y, int64_t ldy, int64_t k,
                      bool accumulate) {
  typename V::Reg acc[T][NV];
  for (int t = 0; t < T; ++t) {
    for (int v = 0; v < NV; ++v) acc[t][v] = accumulate ? V::LoadF32(y + t * ldy + v * V::kLanes) : V::Zero();
  }
  for (int64_t i = 0; i < k; ++i) {
    typename V::Reg bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = V::LoadF32(b + i * ldb + v * V::kLanes);
    for (int t = 0; t < T; ++t) {
      const typename V::Reg xb = V::Broadcast(x[t * ldx + i]);
      for (int v = 0; v < NV; ++v) acc[t][v] = V::Fma(xb, bv[v], acc[t][v]);
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int v = 0; v < NV; ++v) V::StoreF32(y + t * ldy + v * V::kLanes, acc[t][v]);
  }
}

// Rows in blocks of 4 (NV vectors each), or of 12 for a single vector of columns (the absorbed
// decode's scores: a KV tile's rows times 16 heads), whose 4 accumulators alone would wait on the
// FMA latency (12: kFmaChains). A row's outputs are the same whatever its block.
template <class V, int NV>
inline void GemmColumns(const float* x, int64_t ldx, const float* b, int64_t ldb, float* y, int64_t ldy, int64_t n,
                        int64_t k, bool accumulate) {
  int64_t t = 0;
  if constexpr (NV == 1) {
    for (; t + kFmaChains <= n; t += kFmaChains) {
      GemmBlock<V, kFmaChains, 1>(x + t * ldx, ldx, b, ldb, y + t * ldy, ldy, k, accumulate);
    }
  }
  constexpr int kT = 4;
  for (; t + kT <= n; t += kT) GemmBlock<V, kT, NV>(x + t * ldx, ldx, b, ldb, y + t * ldy, ldy, k, accumulate);
  for (; t < n; ++t) GemmBlock<V, 1, NV>(x + t * ldx, ldx, b, ldb, y + t * ldy, ldy, k, accumulate);
}

template <class V>
void GemmF32(const float* x, int64_t ldx, const float* b, int64_t ldb, float* y, int64_t ldy, int64_t n, int64_t k,
             int64_t m, bool accumulate) {
  // 4 tokens x NV vectors of accumulators, NV vectors of b and a broadcast fit the registers
  // (32 on AVX-512, 16 on AVX2).
  constexpr int kNV = V::kLanes >= 16 ? 4 : 2;
  int64_t j = 0;
  for (; j + kNV * V::kLanes <= m; j += kNV * V::kLanes) {
    GemmColumns<V, kNV>(x, ldx, b + j, ldb, y + j, ldy, n, k, accumulate);
  }
  for (; j + V::kLanes <= m; j += V::kLanes) GemmColumns<V, 1>(x, ldx, b + j, ldb, y + j, ldy, n, k, accumulate);
  for (; j < m; ++j) {
    for (int64_t t = 0; t < n; ++t) {
      float sum = accumulate ? y[t * ldy + j] : 0.0f;
      // Fused, as the vector lanes: a column's value does not depend on m (tensor-parallel
      // ranks compute subsets of the heads' columns).
      for (int64_t i = 0; i < k; ++i) sum = std::fma(x[t * ldx + i], b[i * ldb + j], sum);
      y[t * ldy + j] = sum;
    }
  }
}

}  // namespace mlaserve::MLASERVE_SIMD_NS
