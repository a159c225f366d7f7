#include "kernels/pack.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "core/float16.h"
#include "kernels/weight_value.h"

namespace mlaserve {
namespace {

size_t PackedValueBytes(const WeightMatrix& src) { return size_t(src.num_panels()) * src.panel_bytes(); }

// Packed scale bytes: fp8 keeps its block grid; grouped formats get [panel][group][16]
// (uint4-min: [panel][group][2][16]).
size_t PackedScaleBytes(const WeightMatrix& src) {
  if (size_t(src.group_scale_bytes()) > 0) {
    return size_t(src.num_panels()) * size_t(src.scale_cols()) * kPanelRows * size_t(src.group_scale_bytes());
  }
  return src.scale_bytes();
}

void PackRowValues(const WeightMatrix& src, int64_t r, std::byte* panel, int64_t lane) {
  const std::byte* row = src.row(r);
  if (src.format == WeightFormat::kInt4Group) {
    // Column pair j of the row is byte j of the row (even column low) and goes to lane `lane` of
    // the panel's pair j (16 bytes per pair): the row's bytes, spread 16 apart.
    for (int64_t j = 0; j < src.cols / 2; ++j) panel[size_t(j) * kPanelRows + size_t(lane)] = row[j];
    return;
  }
  if (src.format == WeightFormat::kUint4GroupMin) {
    // Eight j: byte k of lane `lane`'s word holds columns 8j + k (low) and 8j + 4 + k (high).
    const auto nibble = [&](int64_t c) { return (uint8_t(row[c / 2]) >> (4 * (c % 2))) & 0x0F; };
    for (int64_t j = 0; j < src.cols / 8; ++j) {
      for (int64_t k = 0; k < 4; ++k) {
        panel[size_t(j) * 4 * kPanelRows + 4 * size_t(lane) + size_t(k)] =
            std::byte(nibble(8 * j + k) | (nibble(8 * j + 4 + k) << 4));
      }
    }
    return;
  }
  if (src.format == WeightFormat::kInt8Group || src.format == WeightFormat::kUint8GroupMin) {
    // Columns 4j .. 4j + 3 of the row are lane `lane`'s word of the panel's quad j (64 bytes).
    for (int64_t j = 0; j < src.cols / 4; ++j) {
      std::memcpy(panel + size_t(j) * 4 * kPanelRows + 4 * size_t(lane), row + 4 * j, 4);
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

size_t PackAlignUp(size_t bytes) {
  constexpr size_t kAlign = 64;
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

size_t PackedBytes(const WeightMatrix& src) {
  return PackAlignUp(PackedValueBytes(src)) + PackAlignUp(PackedScaleBytes(src));
}

WeightMatrix PackPanels(const WeightMatrix& src, std::byte* dst, ThreadPool& pool) {
  // int8 panels hold columns in fours, uint4-min ones in eights, and a group never splits them
  // (weight_matrix.h).
  assert(src.format != WeightFormat::kInt8Group || (src.cols % 4 == 0 && src.block_cols % 4 == 0));
  assert(src.format != WeightFormat::kUint4GroupMin || (src.cols % 8 == 0 && src.block_cols % 8 == 0));
  assert(src.format != WeightFormat::kUint8GroupMin || (src.cols % 4 == 0 && src.block_cols % 4 == 0));
  std::byte* scales = dst + PackAlignUp(PackedValueBytes(src));
  pool.ParallelFor(src.num_panels(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      std::byte* panel = dst + size_t(p) * src.panel_bytes();
      const int64_t rows = std::min<int64_t>(kPanelRows, src.rows - p * kPanelRows);
      for (int64_t i = 0; i < rows; ++i) {
        PackRowValues(src, p * kPanelRows + i, panel, i);
        if (const size_t sb = size_t(src.group_scale_bytes()); sb > 0) {
          // Row scales [scale_row0 + r][g] -> [p][g][i].
          const auto* row_scales = static_cast<const std::byte*>(src.scales) +
                                   size_t(src.scale_row0 + p * kPanelRows + i) * size_t(src.scale_cols()) * sb;
          for (int64_t g = 0; g < src.scale_cols(); ++g) {
            const size_t at = (size_t(p) * size_t(src.scale_cols()) + size_t(g)) * kPanelRows;
            if (src.has_mins()) {
              // (scale, min) -> the group's 16 scales, then its 16 mins.
              std::memcpy(scales + (2 * at + size_t(i)) * 4, row_scales + size_t(g) * sb, 4);
              std::memcpy(scales + (2 * at + kPanelRows + size_t(i)) * 4, row_scales + size_t(g) * sb + 4, 4);
            } else {
              std::memcpy(scales + (at + size_t(i)) * sb, row_scales + size_t(g) * sb, sb);
            }
          }
        }
      }
    }
  });
  WeightMatrix packed = src;
  packed.data = dst;
  packed.packed = true;
  if (src.format == WeightFormat::kFp8Block) {
    // The grid rows of a slice start at scale_row0 / block_rows; packed views index the grid from
    // row 0, so a slice is packed only from a band's first row (kv_b's per-head copies).
    assert(src.scale_row0 % src.block_rows == 0);
    const auto* grid = static_cast<const std::byte*>(src.scales) +
                       size_t(src.scale_row0 / src.block_rows) * size_t(src.scale_cols()) * sizeof(float);
    std::memcpy(scales, grid, src.scale_bytes());
  }
  if (src.quantized()) {
    packed.scales = scales;
    packed.scale_row0 = 0;
  }
  return packed;
}

bool CanPackTransposed(const WeightMatrix& src) {
  if (src.packed) return false;
  switch (src.format) {
    case WeightFormat::kDense: return true;
    // Codes in whole 32-bit words of the copy's rows (the int8 and uint4-min panel layouts).
    case WeightFormat::kInt8Group:
    case WeightFormat::kUint8GroupMin: return src.rows % 4 == 0;
    case WeightFormat::kUint4GroupMin: return src.rows % 8 == 0;
    // Whole bands (a slice from a band's first row): the copy's grid is the source's transposed.
    case WeightFormat::kFp8Block: return src.block_rows > 0 && src.scale_row0 % src.block_rows == 0;
    default: return false;
  }
}

WeightMatrix TransposedShape(const WeightMatrix& src) {
  WeightMatrix t{.dtype = src.dtype, .rows = src.cols, .cols = src.rows, .format = src.format};
  if (src.format == WeightFormat::kFp8Block) {  // the blocks transposed
    t.block_rows = src.block_cols;
    t.block_cols = src.block_rows;
  } else if (src.quantized()) {
    t.block_cols = int(src.rows);  // one group per row: unit scale (and zero min)
  }
  return t;
}

WeightMatrix PackTransposedPanels(const WeightMatrix& src, std::byte* dst) {
  assert(CanPackTransposed(src));
  WeightMatrix packed = TransposedShape(src);
  packed.data = dst;
  packed.packed = true;
  const size_t value_bytes = size_t(DTypeBytes(src.dtype));
  // uint4 codes are or-ed into their bytes (two columns a byte): start from zero, whatever dst held.
  if (src.format == WeightFormat::kUint4GroupMin) std::memset(dst, 0, PackedValueBytes(packed));
  for (int64_t p = 0; p < packed.num_panels(); ++p) {
    std::byte* panel = dst + size_t(p) * packed.panel_bytes();
    for (int64_t i = 0; i < std::min<int64_t>(kPanelRows, packed.rows - p * kPanelRows); ++i) {
      const int64_t c = p * kPanelRows + i;  // the source's column: the copy's row, lane i
      for (int64_t r = 0; r < src.rows; ++r) {  // the source's row: the copy's column
        if (src.format == WeightFormat::kUint4GroupMin) {
          // [cols / 8][16][4]: byte k of lane i's word in eight j holds columns 8j + k (low nibble)
          // and 8j + 4 + k (high); the source's nibble c % 2 of byte c / 2.
          const uint8_t code = (uint8_t(src.row(r)[c / 2]) >> (4 * (c % 2))) & 0x0F;
          std::byte& to = panel[size_t(r / 8) * 4 * kPanelRows + 4 * size_t(i) + size_t(r % 8 % 4)];
          to |= std::byte(code << (4 * (r % 8 / 4)));
          continue;
        }
        const std::byte* from = src.row(r) + size_t(c) * value_bytes;
        if (src.format == WeightFormat::kInt8Group || src.format == WeightFormat::kUint8GroupMin) {
          panel[size_t(r / 4) * 4 * kPanelRows + 4 * size_t(i) + size_t(r % 4)] = *from;  // [cols / 4][16][4]
        } else {
          std::memcpy(panel + (size_t(r) * kPanelRows + size_t(i)) * value_bytes, from, value_bytes);
        }
      }
    }
  }
  if (src.format == WeightFormat::kFp8Block) {
    // The copy's grid [source column blocks][source row bands]: (g, b) = the source's (b, g), its
    // bands counted from the slice's first (scale_row0 / block_rows).
    auto* scales = reinterpret_cast<float*>(dst + PackAlignUp(PackedValueBytes(packed)));
    const int64_t bands = (src.rows + src.block_rows - 1) / src.block_rows, first_band = src.scale_row0 / src.block_rows;
    for (int64_t g = 0; g < src.scale_cols(); ++g) {
      for (int64_t b = 0; b < bands; ++b) {
        scales[g * bands + b] = LoadF32Unaligned(src.scales, size_t((first_band + b) * src.scale_cols() + g));
      }
    }
    packed.scales = scales;
  } else if (src.quantized()) {
    // [panel][1][16] unit scales; with mins, [panel][1][2][16]: 16 unit scales, then 16 zero mins.
    auto* scales = reinterpret_cast<float*>(dst + PackAlignUp(PackedValueBytes(packed)));
    for (int64_t p = 0; p < packed.num_panels(); ++p) {
      const int64_t stride = src.has_mins() ? 2 * kPanelRows : kPanelRows;
      std::fill(scales + p * stride, scales + p * stride + kPanelRows, 1.0f);
      if (src.has_mins()) std::fill(scales + p * stride + kPanelRows, scales + (p + 1) * stride, 0.0f);
    }
    packed.scales = scales;
  }
  return packed;
}

size_t PackedF32PanelsBytes(int64_t rows, int64_t cols, DType dtype) {
  return size_t((rows + kPanelRows - 1) / kPanelRows) * size_t(cols) * kPanelRows * size_t(DTypeBytes(dtype));
}

WeightMatrix PackF32Panels(const float* src, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                           DType dtype, void* dst) {
  const int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t lanes = std::min<int64_t>(kPanelRows, rows - p * kPanelRows);
    for (int64_t c = 0; c < cols; ++c) {
      const float* from = src + (p * kPanelRows) * row_stride + c * col_stride;
      const int64_t at = (p * cols + c) * kPanelRows;  // the column's first lane
      if (dtype == DType::kBF16) {
        uint16_t* out = static_cast<uint16_t*>(dst) + at;
        for (int64_t i = 0; i < lanes; ++i) out[i] = F32ToBf16(from[i * row_stride]);
        for (int64_t i = lanes; i < kPanelRows; ++i) out[i] = 0;
      } else {
        float* out = static_cast<float*>(dst) + at;
        for (int64_t i = 0; i < lanes; ++i) out[i] = from[i * row_stride];
        for (int64_t i = lanes; i < kPanelRows; ++i) out[i] = 0.0f;
      }
    }
  }
  return WeightMatrix{.dtype = dtype, .rows = rows, .cols = cols, .data = dst, .packed = true};
}

Status PackAll(std::span<WeightMatrix* const> matrices, HugePageBuffer& storage, ThreadPool& pool,
               const std::function<void(const WeightMatrix&)>& after_each) {
  size_t total = 0;
  for (const WeightMatrix* m : matrices) total += (PackedBytes(*m) + 63) / 64 * 64;  // each 64-byte aligned
  if (!storage.Assign(total)) {
    return Status::Error("out of memory packing the weights (" + std::to_string(total) + " bytes)");
  }
  size_t offset = 0;
  for (WeightMatrix* m : matrices) {
    const size_t bytes = PackedBytes(*m);
    const WeightMatrix source = *m;
    *m = PackPanels(source, storage.data() + offset, pool);
    offset += (bytes + 63) / 64 * 64;
    if (after_each) after_each(source);
  }
  return Status::Ok();
}

}  // namespace mlaserve
