// A borrowed view of a 2-D weight [rows, cols] in the checkpoint's stored format, either
// row-major, or packed in panels of kPanelRows rows: [ceil(rows / 16)][cols][16], the layout the
// matmul kernels stream (one sequential read per panel, 16 outputs per vector, and every output
// summed over columns in order, whatever the batch). Kernels read it in place and widen to fp32
// in registers (scale applied per block); nothing is ever dequantized into a buffer.
//
// Formats (WeightFormat):
//   kDense     F32, BF16 or F16 values.
//   kFp8Block  E4M3 codes (1 byte each), real = code * scale of its [block_rows x block_cols]
//              block; scales: F32 [ceil(rows / block_rows)][ceil(cols / block_cols)], row-major,
//              indexed from row `scale_row0` (a Slice keeps the grid of its parent).
//              (DeepSeek-V3 / Kimi-K2 `weight` + `weight_scale_inv`.)
//   kInt4Group 4-bit two's-complement-plus-8 nibbles (q + 8), two per byte, the even column (or
//              panel lane) in the low nibble; real = (nibble - 8) * scale of its group of
//              `group_cols` columns. Row-major: row r is cols / 2 bytes (the compressed-tensors
//              `weight_packed` int32 words, little-endian, are exactly this), scales BF16
//              [rows][cols / group_cols]. Packed: [cols / 2][16] bytes, byte k of column pair j
//              holding lane k's nibbles of columns 2j (low) and 2j + 1 (high); scales BF16
//              [panel][cols / group_cols][16].
//   kInt8Group int8 codes (1 byte each); real = code * scale of its group of `group_cols`
//              columns (a multiple of 4 when packed). Row-major: row r is cols bytes, scales F32
//              [rows][cols / group_cols]. Packed: [cols / 4][16][4] bytes, lane i's codes of
//              columns 4j .. 4j + 3 at bytes 64j + 4i .. 64j + 4i + 3 (one 32-bit word per lane:
//              the order of the int8 dot-product instruction, vpdpbusd), scales F32
//              [panel][cols / group_cols][16]. (GGUF's Q8_0: groups of 32, fp16 scales widened
//              exactly.)
//   kUint4GroupMin 4-bit unsigned codes (0 .. 15); real = code * scale - min of its group of
//              `group_cols` columns (a multiple of 8). Row-major: row r is cols / 2 bytes, byte j
//              holding column 2j (low nibble) and 2j + 1 (high), and (scale, min) F32 pairs
//              [rows][cols / group_cols][2]. Packed: [cols / 8][16][4] bytes, byte k of lane i's
//              word in eight j holding columns 8j + k (low nibble) and 8j + 4 + k (high): a mask
//              and a shift give the int8 dot product's four columns at a time; scales then mins
//              F32 [panel][cols / group_cols][2][16]. (GGUF's Q4_K: groups of 32, its 6-bit
//              scales and mins times the super-block's fp16 d and dmin, exact in F32.)
//   kUint8GroupMin 8-bit unsigned codes; real = code * scale - min of its group (a multiple of 4).
//              Row-major: row r is cols bytes, (scale, min) pairs as kUint4GroupMin's. Packed:
//              codes as kInt8Group's, [cols / 4][16][4]; scales then mins as kUint4GroupMin's.
//              (GGUF's Q5_K: its 5-bit codes, groups of 32.)
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace mlaserve {

inline constexpr int kPanelRows = 16;

// Where a kernel prefetches in a panel stream: `ahead` bytes past `at`, at byte `pos` of its
// panel's stream of `stream_bytes` (codes, or scale lines), in a kernel block that reads `panels`
// consecutive panels side by side, each a stream of its own, stream_bytes apart. Past the panel's
// end the plain address would land in a neighbour the block is reading (and leave the next
// block's last panel to start cold); it goes panels - 1 panels further on instead, into this
// stream's own panel of the next block. A wasted prefetch past the matrix never faults.
inline const char* PanelPrefetchAddress(const void* at, int64_t pos, int64_t ahead, int64_t stream_bytes, int panels) {
  return static_cast<const char*>(at) + ahead + (pos + ahead >= stream_bytes ? (panels - 1) * stream_bytes : 0);
}

enum class WeightFormat { kDense, kFp8Block, kInt4Group, kInt8Group, kUint4GroupMin, kUint8GroupMin };

// Bytes of one group's scale of a grouped format (int4: BF16, int8: F32, uint4-min and uint8-min:
// an F32 scale and min); 0 for the others.
constexpr int GroupScaleBytes(WeightFormat format) {
  switch (format) {
    case WeightFormat::kInt4Group: return 2;
    case WeightFormat::kInt8Group: return 4;
    case WeightFormat::kUint4GroupMin:
    case WeightFormat::kUint8GroupMin: return 8;
    default: return 0;
  }
}

struct WeightMatrix {
  DType dtype = DType::kBF16;  // kDense: F32/BF16/F16; kFp8Block: F8_E4M3; kInt4Group: I32; kInt8Group, kUint*GroupMin: I8
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  bool packed = false;  // panels of kPanelRows (row(), Slice() are for row-major only)
  WeightFormat format = WeightFormat::kDense;
  const void* scales = nullptr;  // quantized formats only (see above; kUint4GroupMin: with the mins); may be unaligned
  int block_rows = 1;            // kFp8Block: rows per scale block
  int block_cols = 1;            // kFp8Block: columns per scale block; kInt4Group, kInt8Group: group size
  int64_t scale_row0 = 0;        // row-major: the first row's index in the scale grid

  bool quantized() const { return format != WeightFormat::kDense; }
  int group_scale_bytes() const { return GroupScaleBytes(format); }
  bool four_bit() const { return format == WeightFormat::kInt4Group || format == WeightFormat::kUint4GroupMin; }
  // Formats whose groups carry a min beside the scale: real = code * scale - min.
  bool has_mins() const { return format == WeightFormat::kUint4GroupMin || format == WeightFormat::kUint8GroupMin; }
  int64_t num_panels() const { return (rows + kPanelRows - 1) / kPanelRows; }
  int64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
  size_t panel_bytes() const { return size_t(kPanelRows) * row_bytes(); }
  const std::byte* panel(int64_t p) const {
    return static_cast<const std::byte*>(data) + size_t(p) * panel_bytes();
  }

  size_t row_bytes() const {
    return four_bit() ? size_t(cols) / 2 : size_t(cols) * DTypeBytes(dtype);
  }
  size_t total_bytes() const { return size_t(rows) * row_bytes(); }
  // Bytes of the scales (quantized formats), as the checkpoint stores them.
  size_t scale_bytes() const {
    if (format == WeightFormat::kFp8Block) {
      return size_t((rows + block_rows - 1) / block_rows) * size_t(scale_cols()) * 4;
    }
    return size_t(rows) * size_t(scale_cols()) * size_t(group_scale_bytes());
  }
  // Bytes a full read of the matrix touches: values plus scales.
  size_t stored_bytes() const { return total_bytes() + scale_bytes(); }
  const std::byte* row(int64_t r) const {
    return static_cast<const std::byte*>(data) + size_t(r) * row_bytes();
  }
  // Rows [begin, begin + count) as a matrix of their own (row-major only).
  WeightMatrix Slice(int64_t begin, int64_t count) const {
    WeightMatrix s = *this;
    s.rows = count;
    s.data = row(begin);
    s.scale_row0 = scale_row0 + begin;
    return s;
  }
};

}  // namespace mlaserve
