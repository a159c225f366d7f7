#include "kernels/pack.h"

#include <algorithm>
#include <cstring>

namespace mlaserve {

size_t PackedBytes(const WeightMatrix& src) { return size_t(src.num_panels()) * src.panel_bytes(); }

WeightMatrix PackPanels(const WeightMatrix& src, std::byte* dst, ThreadPool& pool) {
  const size_t value_bytes = size_t(DTypeBytes(src.dtype));
  pool.ParallelFor(src.num_panels(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      std::byte* panel = dst + size_t(p) * src.panel_bytes();
      const int64_t rows = std::min<int64_t>(kPanelRows, src.rows - p * kPanelRows);
      for (int64_t i = 0; i < rows; ++i) {
        const std::byte* row = src.row(p * kPanelRows + i);
        for (int64_t c = 0; c < src.cols; ++c) {
          std::memcpy(panel + (size_t(c) * kPanelRows + size_t(i)) * value_bytes, row + size_t(c) * value_bytes,
                      value_bytes);
        }
      }
    }
  });
  WeightMatrix packed = src;
  packed.data = dst;
  packed.packed = true;
  return packed;
}

}  // namespace mlaserve
