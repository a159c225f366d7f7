// Scalar conversions between fp32 and the 16-bit float formats stored in checkpoints.
// bf16 -> fp32 is exact; fp32 -> bf16 rounds to nearest even (NaN stays NaN).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/types.h"

namespace mlaserve {
// Internal linkage on purpose: SIMD translation units compiled with wider ISA flags include this
// file, and their copies must never be merged with the baseline ones by the linker.
namespace {

inline float Bf16ToF32(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }

inline uint16_t F32ToBf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t((bits + rounding) >> 16);
}

inline float F16ToF32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    // Subnormal (or zero): value = mantissa * 2^-24.
    float magnitude = std::ldexp(float(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Round to nearest even; overflow becomes infinity, NaN stays NaN.
inline uint16_t F32ToF16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504: infinity
  if (magnitude < 0x38800000u) {                        // below 2^-14: subnormal in fp16
    const float scaled = std::bit_cast<float>(magnitude) * 16777216.0f;  // exact: times 2^24
    return uint16_t(sign | uint32_t(std::nearbyint(scaled)));
  }
  uint32_t h = ((((magnitude >> 23) - 112u) << 10) | ((magnitude & 0x7fffffu) >> 13));
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

// One stored value of a float dtype (F32, BF16, F16) as fp32; p may be unaligned.
template <DType D>
inline float LoadAsF32(const std::byte* p) {
  if constexpr (D == DType::kF32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  } else {
    uint16_t b;
    std::memcpy(&b, p, 2);
    if constexpr (D == DType::kBF16) return Bf16ToF32(b);
    else return F16ToF32(b);
  }
}

inline float LoadAsF32(DType dtype, const std::byte* p) {
  switch (dtype) {
    case DType::kF32: return LoadAsF32<DType::kF32>(p);
    case DType::kBF16: return LoadAsF32<DType::kBF16>(p);
    case DType::kF16: return LoadAsF32<DType::kF16>(p);
    default: return 0.0f;  // integer dtypes are not weights
  }
}

}  // namespace
}  // namespace mlaserve
