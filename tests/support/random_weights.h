// Random weight matrices for the kernel tests, in the row-major layouts checkpoints store, and
// their packed copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/weight_matrix.h"

namespace mlaserve::testing {

// Dense values (F32, BF16 or F16) drawn from N(0, 1). `matrix` views `bytes`.
struct Weights {
  std::vector<std::byte> bytes;
  WeightMatrix matrix;
};
Weights RandomWeights(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng);

// Random quantized weights: fp8 codes (every finite E4M3 code) with F32 block scales, int4
// nibbles with BF16 group scales, int8 codes with F32 group scales, or uint4 codes with F32
// (scale, min) pairs. `matrix` views `codes` and `scales`.
struct QuantWeights {
  std::vector<std::byte> codes;
  std::vector<std::byte> scales;
  WeightMatrix matrix;
};
QuantWeights RandomQuantWeights(WeightFormat format, int64_t rows, int64_t cols, int block_rows, int block_cols,
                                std::mt19937& rng);

// A packed copy (PackPanels) of a row-major matrix; `matrix` views `bytes`.
struct PackedWeights {
  std::vector<std::byte> bytes;
  WeightMatrix matrix;
};
PackedWeights Packed(const WeightMatrix& row_major, ThreadPool& pool);

}  // namespace mlaserve::testing
