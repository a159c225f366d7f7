#include "support/random_weights.h"

#include <cstring>

#include "core/float16.h"
#include "kernels/pack.h"

namespace mlaserve::testing {

Weights RandomWeights(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Weights w;
  w.bytes.resize(size_t(rows * cols) * size_t(DTypeBytes(dtype)));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float v = dist(rng);
    if (dtype == DType::kF32) {
      std::memcpy(w.bytes.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = dtype == DType::kBF16 ? F32ToBf16(v) : F32ToF16(v);
      std::memcpy(w.bytes.data() + 2 * i, &h, 2);
    }
  }
  w.matrix = WeightMatrix{dtype, rows, cols, w.bytes.data()};
  return w;
}

QuantWeights RandomQuantWeights(WeightFormat format, int64_t rows, int64_t cols, int block_rows, int block_cols,
                                std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  QuantWeights w;
  w.matrix = WeightMatrix{.dtype = format == WeightFormat::kFp8Block ? DType::kF8E4M3
                                   : format == WeightFormat::kInt4Group ? DType::kI32
                                                                        : DType::kI8,
                          .rows = rows, .cols = cols, .format = format, .block_rows = block_rows,
                          .block_cols = block_cols};
  w.codes.resize(w.matrix.total_bytes());
  for (std::byte& b : w.codes) {
    int v = byte(rng);
    if (format == WeightFormat::kFp8Block && (v & 0x7f) == 0x7f) v &= 0xfe;  // no NaN codes
    b = std::byte(v);
  }
  w.scales.resize(w.matrix.scale_bytes());
  const bool f32_scales = format != WeightFormat::kInt4Group;  // uint4-min: (scale, min) pairs, both F32
  for (size_t i = 0; i < w.scales.size(); i += f32_scales ? 4 : 2) {
    const float s = scale(rng);
    if (f32_scales) {
      std::memcpy(w.scales.data() + i, &s, 4);
    } else {
      const uint16_t h = F32ToBf16(s);
      std::memcpy(w.scales.data() + i, &h, 2);
    }
  }
  w.matrix.data = w.codes.data();
  w.matrix.scales = w.scales.data();
  return w;
}

PackedWeights Packed(const WeightMatrix& row_major, ThreadPool& pool) {
  PackedWeights p;
  p.bytes.assign(PackedBytes(row_major), std::byte{0});
  p.matrix = PackPanels(row_major, p.bytes.data(), pool);
  return p;
}

}  // namespace mlaserve::testing
