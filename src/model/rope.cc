#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mlaserve {
namespace {

// Dimension index whose wavelength completes `num_rotations` turns over the original context.
double YarnCorrectionDim(double num_rotations, int dim, double base, int max_positions) {
  return (dim * std::log(max_positions / (num_rotations * 2.0 * std::numbers::pi))) /
         (2.0 * std::log(base));
}

}  // namespace

RopeTables::RopeTables(const ModelConfig& c, int max_positions)
    : rope_dim_(c.qk_rope_head_dim), interleave_(c.rope_interleave), max_positions_(max_positions) {
  const int half = rope_dim_ / 2;
  const float base = float(c.rope_theta);
  inv_freq_.resize(size_t(half));
  // fp32 like the reference implementations, so positions agree to the last bits they can.
  for (int i = 0; i < half; ++i) {
    inv_freq_[size_t(i)] = 1.0f / std::pow(base, float(2 * i) / float(rope_dim_));
  }
  float mscale = 1.0f;
  if (c.yarn.enabled) {
    const YarnScaling& y = c.yarn;
    double low = std::floor(YarnCorrectionDim(y.beta_fast, rope_dim_, c.rope_theta,
                                              y.original_max_position_embeddings));
    double high = std::ceil(YarnCorrectionDim(y.beta_slow, rope_dim_, c.rope_theta,
                                              y.original_max_position_embeddings));
    low = std::max(low, 0.0);
    high = std::min(high, double(rope_dim_ - 1));
    if (low == high) high += 0.001;  // avoid a zero-width ramp
    for (int i = 0; i < half; ++i) {
      const float extrapolation = inv_freq_[size_t(i)];
      const float interpolation = extrapolation / float(y.factor);
      const float ramp = std::clamp(float((i - low) / (high - low)), 0.0f, 1.0f);
      const float keep = 1.0f - ramp;  // 1: high-frequency dims keep their original frequency
      inv_freq_[size_t(i)] = interpolation * (1.0f - keep) + extrapolation * keep;
    }
    mscale = float(YarnGetMscale(y.factor, y.mscale) /
                   (y.mscale_all_dim != 0.0 ? YarnGetMscale(y.factor, y.mscale_all_dim) : 1.0));
  }
  cos_.resize(size_t(max_positions) * half);
  sin_.resize(size_t(max_positions) * half);
  for (int p = 0; p < max_positions; ++p) {
    for (int i = 0; i < half; ++i) {
      const float angle = float(p) * inv_freq_[size_t(i)];
      cos_[size_t(p) * half + i] = std::cos(angle) * mscale;
      sin_[size_t(p) * half + i] = std::sin(angle) * mscale;
    }
  }
}

void RopeTables::Apply(float* x, int position) const {
  const int half = rope_dim_ / 2;
  const float* cs = cos_.data() + size_t(position) * half;
  const float* sn = sin_.data() + size_t(position) * half;
  for (int i = 0; i < half; ++i) {
    const int a = interleave_ ? 2 * i : i;
    const int b = interleave_ ? 2 * i + 1 : i + half;
    const float xa = x[a], xb = x[b];
    x[a] = xa * cs[i] - xb * sn[i];
    x[b] = xb * cs[i] + xa * sn[i];
  }
}

}  // namespace mlaserve
