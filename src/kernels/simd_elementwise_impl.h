// The element-wise kernels (RMSNorm, the fused residual add + RMSNorm, SiLU * up), written once
// over the vector traits V of simd_kernels_impl.h (which also provides Div, Fnma, Min, Max,
// Round and Pow2 for these). Included by kernels_avx2.cc and kernels_avx512.cc after defining
// MLASERVE_SIMD_NS. The portable table's versions (ops.cc RmsNorm, SiluMul) are the
// reference the tests compare these with.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#ifndef MLASERVE_SIMD_NS
#error "define MLASERVE_SIMD_NS before including simd_elementwise_impl.h"
#endif

namespace mlaserve::MLASERVE_SIMD_NS {

// e^x, within 2 ulp of std::exp over [-87, 88] (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a
// degree-6 polynomial for e^r, then 2^n in the exponent field). x is clamped to [-87, 88], so
// e^x stays a normal float (exp(-87) ~ 1.6e-38 where std::exp would go denormal or to 0).
template <class V>
inline typename V::Reg ExpF32(typename V::Reg x) {
  x = V::Min(V::Max(x, V::Broadcast(-87.0f)), V::Broadcast(88.0f));
  const typename V::Reg n = V::Round(V::Mul(x, V::Broadcast(1.44269504088896341f)));
  typename V::Reg r = V::Fnma(n, V::Broadcast(0.693359375f), x);  // ln2 split in two for an exact product
  r = V::Fnma(n, V::Broadcast(-2.12194440e-4f), r);
  typename V::Reg p = V::Broadcast(1.9875691500e-4f);
  p = V::Fma(p, r, V::Broadcast(1.3981999507e-3f));
  p = V::Fma(p, r, V::Broadcast(8.3334519073e-3f));
  p = V::Fma(p, r, V::Broadcast(4.1665795894e-2f));
  p = V::Fma(p, r, V::Broadcast(1.6666665459e-1f));
  p = V::Fma(p, r, V::Broadcast(5.0000001201e-1f));
  p = V::Fma(p, V::Mul(r, r), V::Add(r, V::Broadcast(1.0f)));
  return V::Mul(p, V::Pow2(n));  // n in [-126, 127] after the clamp: a normal power of two
}

// sum x[i]^2 over four accumulators (lane-wise, then across lanes), the tail in order.
template <class V>
inline float SumSquares(const float* x, int64_t dim) {
  typename V::Reg a0 = V::Zero(), a1 = V::Zero(), a2 = V::Zero(), a3 = V::Zero();
  int64_t i = 0;
  for (; i + 4 * V::kLanes <= dim; i += 4 * V::kLanes) {
    const typename V::Reg v0 = V::LoadF32(x + i), v1 = V::LoadF32(x + i + V::kLanes);
    const typename V::Reg v2 = V::LoadF32(x + i + 2 * V::kLanes), v3 = V::LoadF32(x + i + 3 * V::kLanes);
    a0 = V::Fma(v0, v0, a0);
    a1 = V::Fma(v1, v1, a1);
    a2 = V::Fma(v2, v2, a2);
    a3 = V::Fma(v3, v3, a3);
  }
  for (; i + V::kLanes <= dim; i += V::kLanes) {
    const typename V::Reg v = V::LoadF32(x + i);
    a0 = V::Fma(v, v, a0);
  }
  float sum = V::Sum(V::Add(V::Add(a0, a1), V::Add(a2, a3)));
  for (; i < dim; ++i) sum += x[i] * x[i];
  return sum;
}

template <class V>
inline void ScaleByWeight(const float* x, const float* weight, int64_t dim, float inv, float* out) {
  const typename V::Reg s = V::Broadcast(inv);
  int64_t i = 0;
  for (; i + V::kLanes <= dim; i += V::kLanes) {
    V::StoreF32(out + i, V::Mul(V::Mul(V::LoadF32(x + i), s), V::LoadF32(weight + i)));
  }
  for (; i < dim; ++i) out[i] = x[i] * inv * weight[i];
}

inline float InverseRms(float sum_sq, int64_t dim, double eps) {
  return float(1.0 / std::sqrt(double(sum_sq) / double(dim) + eps));
}

template <class V>
inline void RmsNorm(const float* x, const float* weight, int64_t dim, double eps, float* out) {
  ScaleByWeight<V>(x, weight, dim, InverseRms(SumSquares<V>(x, dim), dim, eps), out);
}

template <class V>
inline void AddRmsNorm(float* x, const float* add, const float* weight, int64_t dim, double eps, float* out) {
  int64_t i = 0;
  for (; i + V::kLanes <= dim; i += V::kLanes) V::StoreF32(x + i, V::Add(V::LoadF32(x + i), V::LoadF32(add + i)));
  for (; i < dim; ++i) x[i] += add[i];
  RmsNorm<V>(x, weight, dim, eps, out);
}

template <class V>
inline typename V::Reg SiluTimes(typename V::Reg g, typename V::Reg up) {
  const typename V::Reg silu = V::Div(g, V::Add(V::Broadcast(1.0f), ExpF32<V>(V::Mul(g, V::Broadcast(-1.0f)))));
  return V::Mul(silu, up);
}

// x[i] = e^(x[i] - shift), in place; returns their sum (lane-wise, then across lanes). The tail
// goes through the vector code too (padded; its padding lanes are not summed), so an element's
// value is the same function wherever it falls.
template <class V>
inline float ExpSum(float* x, int64_t n, float shift) {
  const typename V::Reg minus_shift = V::Broadcast(-shift);
  typename V::Reg acc = V::Zero();
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    const typename V::Reg e = ExpF32<V>(V::Add(V::LoadF32(x + i), minus_shift));
    V::StoreF32(x + i, e);
    acc = V::Add(acc, e);
  }
  if (i < n) {
    float tail[V::kLanes] = {};
    std::copy(x + i, x + n, tail);
    V::StoreF32(tail, ExpF32<V>(V::Add(V::LoadF32(tail), minus_shift)));
    std::fill(tail + (n - i), tail + V::kLanes, 0.0f);
    std::copy(tail, tail + (n - i), x + i);
    acc = V::Add(acc, V::LoadF32(tail));
  }
  return V::Sum(acc);
}

// KernelSet::scale_max: two vectors of running maxima, the tail in scalar code.
template <class V>
inline float ScaleMax(float* x, int64_t n, float scale) {
  const typename V::Reg sc = V::Broadcast(scale), lowest = V::Broadcast(-std::numeric_limits<float>::infinity());
  typename V::Reg m0 = lowest, m1 = lowest;
  int64_t i = 0;
  for (; i + 2 * V::kLanes <= n; i += 2 * V::kLanes) {
    const typename V::Reg a = V::Mul(V::LoadF32(x + i), sc), b = V::Mul(V::LoadF32(x + i + V::kLanes), sc);
    V::StoreF32(x + i, a);
    V::StoreF32(x + i + V::kLanes, b);
    m0 = V::Max(m0, a);
    m1 = V::Max(m1, b);
  }
  for (; i + V::kLanes <= n; i += V::kLanes) {
    const typename V::Reg a = V::Mul(V::LoadF32(x + i), sc);
    V::StoreF32(x + i, a);
    m0 = V::Max(m0, a);
  }
  alignas(64) float lanes[V::kLanes];
  V::StoreF32(lanes, V::Max(m0, m1));
  float m = -std::numeric_limits<float>::infinity();
  for (float v : lanes) m = std::max(m, v);
  for (; i < n; ++i) m = std::max(m, x[i] *= scale);
  return m;
}

// KernelSet::softmax_columns: a vector of columns (heads) at a time, the rows in order.
// (e^(-inf - m) is e^-87 here, not 0: it multiplies only a running sum and outputs still zero.)
template <class V>
inline void SoftmaxColumns(float* s, int64_t n, int64_t hp, float scale, float* run_max, float* run_sum,
                           float* corr) {
  const typename V::Reg sc = V::Broadcast(scale), minus_one = V::Broadcast(-1.0f);
  for (int64_t h = 0; h < hp; h += V::kLanes) {
    const typename V::Reg old_max = V::LoadF32(run_max + h);
    typename V::Reg m = old_max;
    for (int64_t r = 0; r < n; ++r) m = V::Max(m, V::Mul(V::LoadF32(s + r * hp + h), sc));
    const typename V::Reg minus_m = V::Mul(m, minus_one);
    const typename V::Reg c = ExpF32<V>(V::Add(old_max, minus_m));
    typename V::Reg sum = V::Mul(V::LoadF32(run_sum + h), c);
    for (int64_t r = 0; r < n; ++r) {
      const typename V::Reg e = ExpF32<V>(V::Add(V::Mul(V::LoadF32(s + r * hp + h), sc), minus_m));
      V::StoreF32(s + r * hp + h, e);
      sum = V::Add(sum, e);
    }
    V::StoreF32(run_max + h, m);
    V::StoreF32(run_sum + h, sum);
    V::StoreF32(corr + h, c);
  }
}

// The tail goes through the vector code too (padded), so an element's value does not depend on
// where a caller's slice of the row starts or ends.
template <class V>
inline void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::StoreF32(out + i, SiluTimes<V>(V::LoadF32(gate + i), V::LoadF32(up + i)));
  if (i == n) return;
  float g[V::kLanes] = {}, u[V::kLanes] = {}, o[V::kLanes];
  std::copy(gate + i, gate + n, g);
  std::copy(up + i, up + n, u);
  V::StoreF32(o, SiluTimes<V>(V::LoadF32(g), V::LoadF32(u)));
  std::copy(o, o + (n - i), out + i);
}

}  // namespace mlaserve::MLASERVE_SIMD_NS
