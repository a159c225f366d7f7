// A borrowed view of a 2-D weight [rows, cols] in the checkpoint's dtype (F32, BF16 or F16),
// either row-major, or packed in panels of kPanelRows rows: [ceil(rows / 16)][cols][16], the
// layout the matmul kernels stream (one sequential read per panel, 16 outputs per vector, and
// every output summed over columns in order, whatever the batch). Kernels read it in place (usually straight from the mmapped checkpoint) and convert
// to fp32 in registers; nothing is ever dequantized into a buffer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace mlaserve {

inline constexpr int kPanelRows = 16;

struct WeightMatrix {
  DType dtype = DType::kBF16;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  bool packed = false;  // panels of kPanelRows (row(), Slice() are for row-major only)

  int64_t num_panels() const { return (rows + kPanelRows - 1) / kPanelRows; }
  size_t panel_bytes() const { return size_t(kPanelRows) * row_bytes(); }
  const std::byte* panel(int64_t p) const {
    return static_cast<const std::byte*>(data) + size_t(p) * panel_bytes();
  }

  size_t row_bytes() const { return size_t(cols) * DTypeBytes(dtype); }
  size_t total_bytes() const { return size_t(rows) * row_bytes(); }
  const std::byte* row(int64_t r) const {
    return static_cast<const std::byte*>(data) + size_t(r) * row_bytes();
  }
  // Rows [begin, begin + count) as a matrix of their own.
  WeightMatrix Slice(int64_t begin, int64_t count) const {
    return WeightMatrix{dtype, count, cols, row(begin)};
  }
};

}  // namespace mlaserve
