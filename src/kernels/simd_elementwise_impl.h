// The element-wise kernels (RMSNorm, the fused residual add + RMSNorm, SiLU * up) for one SIMD
// instruction set. Included by kernels_avx2.cc and kernels_avx512.cc after defining
// MLASERVE_SIMD_NS; the vector width follows the ISA the including file is compiled for
// (__AVX512F__ or AVX2 + FMA). The portable table's versions (ops.cc RmsNorm, SiluMul) are the
// reference the tests compare these with.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#ifndef MLASERVE_SIMD_NS
#error "define MLASERVE_SIMD_NS before including simd_elementwise_impl.h"
#endif

namespace mlaserve::MLASERVE_SIMD_NS {

#if defined(__AVX512F__)
struct ElemVec {
  static constexpr int kLanes = 16;
  using Reg = __m512;
  using IReg = __m512i;
  static Reg Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static Reg Set(float a) { return _mm512_set1_ps(a); }
  static Reg Zero() { return _mm512_setzero_ps(); }
  static Reg Add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg Div(Reg a, Reg b) { return _mm512_div_ps(a, b); }
  static Reg Fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg Fnma(Reg a, Reg b, Reg c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a * b
  static Reg Min(Reg a, Reg b) { return _mm512_min_ps(a, b); }
  static Reg Max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static Reg Round(Reg a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127], as a float: n + 127 in the exponent field.
  static Reg Pow2(Reg n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  static float Sum(Reg v) { return _mm512_reduce_add_ps(v); }
};
#else
struct ElemVec {
  static constexpr int kLanes = 8;
  using Reg = __m256;
  static Reg Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static Reg Set(float a) { return _mm256_set1_ps(a); }
  static Reg Zero() { return _mm256_setzero_ps(); }
  static Reg Add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg Div(Reg a, Reg b) { return _mm256_div_ps(a, b); }
  static Reg Fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg Fnma(Reg a, Reg b, Reg c) { return _mm256_fnmadd_ps(a, b, c); }
  static Reg Min(Reg a, Reg b) { return _mm256_min_ps(a, b); }
  static Reg Max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static Reg Round(Reg a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static Reg Pow2(Reg n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  static float Sum(Reg v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
};
#endif

// e^x, within 2 ulp of std::exp over [-87, 88] (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a
// degree-6 polynomial for e^r, then 2^n in the exponent field). x is clamped to [-87, 88], so
// e^x stays a normal float (exp(-87) ~ 1.6e-38 where std::exp would go denormal or to 0).
inline ElemVec::Reg ExpF32(ElemVec::Reg x) {
  using V = ElemVec;
  x = V::Min(V::Max(x, V::Set(-87.0f)), V::Set(88.0f));
  const V::Reg n = V::Round(V::Mul(x, V::Set(1.44269504088896341f)));
  V::Reg r = V::Fnma(n, V::Set(0.693359375f), x);  // ln2 split in two for an exact product
  r = V::Fnma(n, V::Set(-2.12194440e-4f), r);
  V::Reg p = V::Set(1.9875691500e-4f);
  p = V::Fma(p, r, V::Set(1.3981999507e-3f));
  p = V::Fma(p, r, V::Set(8.3334519073e-3f));
  p = V::Fma(p, r, V::Set(4.1665795894e-2f));
  p = V::Fma(p, r, V::Set(1.6666665459e-1f));
  p = V::Fma(p, r, V::Set(5.0000001201e-1f));
  p = V::Fma(p, V::Mul(r, r), V::Add(r, V::Set(1.0f)));
  return V::Mul(p, V::Pow2(n));  // n in [-126, 127] after the clamp: a normal power of two
}

// sum x[i]^2 over four accumulators (lane-wise, then across lanes), the tail in order.
inline float SumSquares(const float* x, int64_t dim) {
  using V = ElemVec;
  V::Reg a0 = V::Zero(), a1 = V::Zero(), a2 = V::Zero(), a3 = V::Zero();
  int64_t i = 0;
  for (; i + 4 * V::kLanes <= dim; i += 4 * V::kLanes) {
    const V::Reg v0 = V::Load(x + i), v1 = V::Load(x + i + V::kLanes);
    const V::Reg v2 = V::Load(x + i + 2 * V::kLanes), v3 = V::Load(x + i + 3 * V::kLanes);
    a0 = V::Fma(v0, v0, a0);
    a1 = V::Fma(v1, v1, a1);
    a2 = V::Fma(v2, v2, a2);
    a3 = V::Fma(v3, v3, a3);
  }
  for (; i + V::kLanes <= dim; i += V::kLanes) {
    const V::Reg v = V::Load(x + i);
    a0 = V::Fma(v, v, a0);
  }
  float sum = V::Sum(V::Add(V::Add(a0, a1), V::Add(a2, a3)));
  for (; i < dim; ++i) sum += x[i] * x[i];
  return sum;
}

inline void ScaleByWeight(const float* x, const float* weight, int64_t dim, float inv, float* out) {
  using V = ElemVec;
  const V::Reg s = V::Set(inv);
  int64_t i = 0;
  for (; i + V::kLanes <= dim; i += V::kLanes) {
    V::Store(out + i, V::Mul(V::Mul(V::Load(x + i), s), V::Load(weight + i)));
  }
  for (; i < dim; ++i) out[i] = x[i] * inv * weight[i];
}

inline float InverseRms(float sum_sq, int64_t dim, double eps) {
  return float(1.0 / std::sqrt(double(sum_sq) / double(dim) + eps));
}

inline void RmsNorm(const float* x, const float* weight, int64_t dim, double eps, float* out) {
  ScaleByWeight(x, weight, dim, InverseRms(SumSquares(x, dim), dim, eps), out);
}

inline void AddRmsNorm(float* x, const float* add, const float* weight, int64_t dim, double eps, float* out) {
  using V = ElemVec;
  int64_t i = 0;
  for (; i + V::kLanes <= dim; i += V::kLanes) V::Store(x + i, V::Add(V::Load(x + i), V::Load(add + i)));
  for (; i < dim; ++i) x[i] += add[i];
  RmsNorm(x, weight, dim, eps, out);
}

inline ElemVec::Reg SiluTimes(ElemVec::Reg g, ElemVec::Reg up) {
  using V = ElemVec;
  const V::Reg silu = V::Div(g, V::Add(V::Set(1.0f), ExpF32(V::Mul(g, V::Set(-1.0f)))));
  return V::Mul(silu, up);
}

// The tail goes through the vector code too (padded), so an element's value does not depend on
// where a caller's slice of the row starts or ends.
inline void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  using V = ElemVec;
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::Store(out + i, SiluTimes(V::Load(gate + i), V::Load(up + i)));
  if (i == n) return;
  float g[V::kLanes] = {}, u[V::kLanes] = {}, o[V::kLanes];
  std::copy(gate + i, gate + n, g);
  std::copy(up + i, up + n, u);
  V::Store(o, SiluTimes(V::Load(g), V::Load(u)));
  std::copy(o, o + (n - i), out + i);
}

}  // namespace mlaserve::MLASERVE_SIMD_NS
