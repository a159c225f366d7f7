// One weight of a WeightMatrix as fp32, in any format and layout: the plain definition of what
// every kernel computes (the portable table is built on it; the SIMD tables use it for tails).
#pragma once

#include <cmath>
#include <cstring>

#include "core/float16.h"
#include "kernels/weight_matrix.h"
#include "kvcache/fp8.h"

namespace mlaserve {
// Internal linkage on purpose: see core/float16.h.
namespace {

inline float LoadF32Unaligned(const void* base, size_t index) {
  float v;
  std::memcpy(&v, static_cast<const std::byte*>(base) + 4 * index, 4);
  return v;
}

inline float LoadBf16Unaligned(const void* base, size_t index) {
  uint16_t b;
  std::memcpy(&b, static_cast<const std::byte*>(base) + 2 * index, 2);
  return Bf16ToF32(b);
}

// The scale of weight (r, c) of a quantized matrix.
inline float WeightScaleAt(const WeightMatrix& w, int64_t r, int64_t c) {
  const int64_t group = c / w.block_cols;
  if (w.format == WeightFormat::kFp8Block) {
    const int64_t block_row = (w.packed ? r : w.scale_row0 + r) / w.block_rows;
    return LoadF32Unaligned(w.scales, size_t(block_row * w.scale_cols() + group));
  }
  // Grouped formats: int4's scales are BF16, int8's F32, uint4-min's F32 beside their mins.
  if (w.has_mins()) {
    const size_t at = w.packed ? size_t(((r / kPanelRows) * w.scale_cols() + group) * 2 * kPanelRows + r % kPanelRows)
                               : size_t((w.scale_row0 + r) * w.scale_cols() + group) * 2;
    return LoadF32Unaligned(w.scales, at);
  }
  const size_t index = w.packed ? size_t(((r / kPanelRows) * w.scale_cols() + group) * kPanelRows + r % kPanelRows)
                                 : size_t((w.scale_row0 + r) * w.scale_cols() + group);
  return w.format == WeightFormat::kInt8Group ? LoadF32Unaligned(w.scales, index) : LoadBf16Unaligned(w.scales, index);
}

// The min of weight (r, c)'s group (kUint4GroupMin; 0 for every other format).
inline float WeightMinAt(const WeightMatrix& w, int64_t r, int64_t c) {
  if (!w.has_mins()) return 0.0f;
  const int64_t group = c / w.block_cols;
  const size_t at = w.packed ? size_t(((r / kPanelRows) * w.scale_cols() + group) * 2 * kPanelRows + kPanelRows +
                                      r % kPanelRows)
                             : size_t((w.scale_row0 + r) * w.scale_cols() + group) * 2 + 1;
  return LoadF32Unaligned(w.scales, at);
}

// The quantized code of weight (r, c) widened to fp32 (before its scale).
inline float WeightCodeAt(const WeightMatrix& w, int64_t r, int64_t c) {
  // Index of the value in its row (row-major) or panel (packed), counted in values.
  const std::byte* base = w.packed ? w.panel(r / kPanelRows) : w.row(r);
  const int64_t index = w.packed ? c * kPanelRows + r % kPanelRows : c;
  switch (w.format) {
    case WeightFormat::kDense: return LoadAsF32(w.dtype, base + index * DTypeBytes(w.dtype));
    case WeightFormat::kFp8Block: return E4M3ToF32(uint8_t(base[index]));
    case WeightFormat::kInt4Group: {
      // Row-major: byte c / 2 of the row. Packed: lane r % 16 of column pair c / 2.
      const int64_t byte_index = w.packed ? (c / 2) * kPanelRows + r % kPanelRows : c / 2;
      const uint8_t byte = uint8_t(base[byte_index]);
      return float(int((c % 2 == 0) ? (byte & 0x0f) : (byte >> 4)) - 8);
    }
    case WeightFormat::kUint4GroupMin: {
      // Row-major: nibble c % 2 of byte c / 2. Packed: byte (c % 8) % 4 of lane r % 16's word in
      // eight c / 8, nibble (c % 8) / 4.
      if (!w.packed) return float((uint8_t(base[c / 2]) >> (4 * (c % 2))) & 0x0F);
      const uint8_t byte = uint8_t(base[(c / 8) * 4 * kPanelRows + (r % kPanelRows) * 4 + (c % 8) % 4]);
      return float((byte >> (4 * ((c % 8) / 4))) & 0x0F);
    }
    case WeightFormat::kInt8Group:
    case WeightFormat::kUint8GroupMin: {
      // Packed: byte c % 4 of lane r % 16's word in quad c / 4.
      const int64_t byte_index = w.packed ? (c / 4) * 4 * kPanelRows + (r % kPanelRows) * 4 + c % 4 : c;
      return w.format == WeightFormat::kInt8Group ? float(int8_t(base[byte_index])) : float(uint8_t(base[byte_index]));
    }
  }
  return 0.0f;
}

// code * scale (- min): with the min, one fused multiply-add, as the kernels compute it.
inline float WeightAt(const WeightMatrix& w, int64_t r, int64_t c) {
  const float code = WeightCodeAt(w, r, c);
  if (w.has_mins()) return std::fma(code, WeightScaleAt(w, r, c), -WeightMinAt(w, r, c));
  return w.quantized() ? code * WeightScaleAt(w, r, c) : code;
}

}  // namespace
}  // namespace mlaserve
