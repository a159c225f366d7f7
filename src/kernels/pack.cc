#include "kernels/pack.h"

#include <algorithm>
#include <cstring>

namespace mlaserve {
namespace {

constexpr size_t kAlign = 64;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

size_t PackedValueBytes(const WeightMatrix& src) { return size_t(src.num_panels()) * src.panel_bytes(); }

// Packed scale bytes: fp8 keeps its block grid; int4 gets [panel][group][16] BF16.
size_t PackedScaleBytes(const WeightMatrix& src) {
  if (src.format == WeightFormat::kInt4Group) {
    return size_t(src.num_panels()) * size_t(src.scale_cols()) * kPanelRows * 2;
  }
  return src.scale_bytes();
}

void PackRowValues(const WeightMatrix& src, int64_t r, std::byte* panel, int64_t lane) {
  const std::byte* row = src.row(r);
  if (src.format == WeightFormat::kInt4Group) {
    // Nibble c of the row goes to lane `lane` of panel column c (8 bytes per column).
    const int shift = (lane % 2) * 4;
    for (int64_t c = 0; c < src.cols; ++c) {
      const uint8_t byte = uint8_t(row[c / 2]);
      const uint8_t nibble = (c % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
      std::byte& out = panel[size_t(c) * (kPanelRows / 2) + size_t(lane / 2)];
      out |= std::byte(nibble << shift);
    }
    return;
  }
  const size_t value_bytes = size_t(DTypeBytes(src.dtype));
  for (int64_t c = 0; c < src.cols; ++c) {
    std::memcpy(panel + (size_t(c) * kPanelRows + size_t(lane)) * value_bytes, row + size_t(c) * value_bytes,
                value_bytes);
  }
}

}  // namespace

size_t PackedBytes(const WeightMatrix& src) {
  return AlignUp(PackedValueBytes(src)) + AlignUp(PackedScaleBytes(src));
}

WeightMatrix PackPanels(const WeightMatrix& src, std::byte* dst, ThreadPool& pool) {
  std::byte* scales = dst + AlignUp(PackedValueBytes(src));
  pool.ParallelFor(src.num_panels(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      std::byte* panel = dst + size_t(p) * src.panel_bytes();
      const int64_t rows = std::min<int64_t>(kPanelRows, src.rows - p * kPanelRows);
      for (int64_t i = 0; i < rows; ++i) {
        PackRowValues(src, p * kPanelRows + i, panel, i);
        if (src.format == WeightFormat::kInt4Group) {
          // Row scales [scale_row0 + r][g] -> [p][g][i].
          const auto* row_scales = static_cast<const std::byte*>(src.scales) +
                                   size_t(src.scale_row0 + p * kPanelRows + i) * size_t(src.scale_cols()) * 2;
          for (int64_t g = 0; g < src.scale_cols(); ++g) {
            std::memcpy(scales + ((size_t(p) * size_t(src.scale_cols()) + size_t(g)) * kPanelRows + size_t(i)) * 2,
                        row_scales + size_t(g) * 2, 2);
          }
        }
      }
    }
  });
  WeightMatrix packed = src;
  packed.data = dst;
  packed.packed = true;
  if (src.format == WeightFormat::kFp8Block) {
    // The grid rows of a sliced matrix start at scale_row0 / block_rows; packed views index the
    // grid from row 0, so only whole-matrix views are packed.
    std::memcpy(scales, src.scales, src.scale_bytes());
  }
  if (src.quantized()) {
    packed.scales = scales;
    packed.scale_row0 = 0;
  }
  return packed;
}

}  // namespace mlaserve
