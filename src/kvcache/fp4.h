// E2M1, the 4-bit float of the fp4 KV formats (OCP MX spec v1.0 "FP4"): 1 sign, 2 exponent bits
// (bias 1), 1 mantissa bit. Magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (codes 0..7); bit 3 is the
// sign. No infinity, no NaN.
// fp32 -> code rounds to nearest, ties to even, and saturates (|x| > 6 and +-inf give +-6).
// NaN has no code: it becomes +0 (code 0x0). A lone scalar should not invent a magnitude out
// of a NaN; the row codecs (kv_format.cc) never rely on this, they make the whole block read
// back as NaN through its scale byte (OCP MX: a NaN scale makes every value of its block NaN).
// Packing: two codes per byte, the element with the lower index in the low nibble (as in OCP MX
// and NVIDIA's fp4x2 / PyTorch's float4_e2m1fn_x2).
#pragma once

#include <array>
#include <bit>
#include <cstdint>

#include "kvcache/minifloat.h"

namespace mlaserve {
// Internal linkage on purpose: see core/float16.h.
namespace {

inline constexpr float kE2M1Max = 6.0f;
inline constexpr uint8_t kE2M1MaxCode = 0x7;  // +6; 0xF is -6

constexpr uint8_t F32ToE2M1(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return 0;  // NaN: see the file comment
  const uint32_t sign = (bits >> 28) & 0x8u;
  const uint32_t code = minifloat::RoundMagnitudeToCode<1, 1>(magnitude);
  return uint8_t(sign | (code > kE2M1MaxCode ? kE2M1MaxCode : code));
}

// Uses the low 4 bits of `code`.
constexpr float E2M1ToF32(uint8_t code) {
  const float magnitude = minifloat::DecodeMagnitude<1, 1>(code & 0x7u);
  return (code & 0x8u) ? -magnitude : magnitude;
}

namespace fp4_internal {

constexpr std::array<float, 16> MakeE2M1Table() {
  std::array<float, 16> table{};
  for (int code = 0; code < 16; ++code) table[size_t(code)] = E2M1ToF32(uint8_t(code));
  return table;
}

constexpr std::array<float, 512> MakeE2M1PairTable() {
  std::array<float, 512> table{};
  for (int byte = 0; byte < 256; ++byte) {
    table[size_t(2 * byte)] = E2M1ToF32(uint8_t(byte & 0xf));
    table[size_t(2 * byte + 1)] = E2M1ToF32(uint8_t(byte >> 4));
  }
  return table;
}

}  // namespace fp4_internal

// [16] code -> fp32.
inline constexpr std::array<float, 16> kE2M1ToF32 = fp4_internal::MakeE2M1Table();
// [256][2] packed byte -> {value of the low nibble, value of the high nibble}: one load per
// pair of elements in the dequantization loops.
inline constexpr std::array<float, 512> kE2M1PairToF32 = fp4_internal::MakeE2M1PairTable();

// One byte holding `first` (low nibble) and `second` (high nibble).
constexpr uint8_t PackE2M1Pair(uint8_t first, uint8_t second) {
  return uint8_t((first & 0xfu) | ((second & 0xfu) << 4));
}

}  // namespace
}  // namespace mlaserve
