// The arithmetic shared by every small float format of the KV cache (fp8.h, fp4.h): rounding a
// finite fp32 magnitude to the nearest code of a sign-magnitude format with a given mantissa
// width and exponent bias (ties to even, subnormals included), and decoding a magnitude code.
// What codes past the largest finite one mean (saturate, infinity, NaN) is each format's own
// business, so it is decided in fp8.h / fp4.h, not here.
#pragma once

#include <bit>
#include <cstdint>

namespace mlaserve {
// Internal linkage on purpose, as in core/float16.h: SIMD translation units compiled with wider
// ISA flags include these headers, and their copies must never be merged with baseline ones.
namespace {
namespace minifloat {

// 2^exponent as an fp32, exactly, for exponents of normal fp32 numbers.
constexpr float ExactPow2(int exponent) {
  return std::bit_cast<float>(uint32_t(exponent + 127) << 23);
}

// value >> shift, rounded to nearest with ties to even. `value` < 2^24 when shift > 8.
constexpr uint32_t ShiftRightRoundEven(uint32_t value, int shift) {
  if (shift <= 0) return value;
  if (shift >= 26) return 0;  // value < 2^24 <= half of 2^shift: rounds to zero
  const uint32_t quotient = value >> shift;
  const uint32_t remainder = value & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  const bool round_up = remainder > half || (remainder == half && (quotient & 1u));
  return quotient + (round_up ? 1u : 0u);
}

// Rounds a non-negative fp32, given as its bits (sign clear, not NaN; +inf allowed), to the
// nearest magnitude code of a format with `kMantissaBits` stored mantissa bits and exponent bias
// `kBias`: code = exponent_field << kMantissaBits | mantissa. Ties go to the even code. The
// exponent is unbounded above: a result past the format's largest finite code (infinity gives a
// very large code) is for the caller to saturate or map to inf/NaN.
template <int kMantissaBits, int kBias>
constexpr uint32_t RoundMagnitudeToCode(uint32_t magnitude_bits) {
  constexpr int kMinNormalExponent = 1 - kBias;  // unbiased exponent of the smallest normal
  // Every format here has its smallest subnormal far above fp32's subnormal range, so fp32
  // subnormal inputs (below 2^-126) always round to zero.
  static_assert(kMinNormalExponent - kMantissaBits > -120);
  if (magnitude_bits < 0x00800000u) return 0;
  const int exponent = int(magnitude_bits >> 23) - 127;
  if (exponent < kMinNormalExponent) {
    // Subnormal in the target: code = value / 2^(kMinNormalExponent - kMantissaBits), with
    // value = significand * 2^(exponent - 23). A result of 1 << kMantissaBits is the smallest
    // normal code, which is exactly right when rounding carries out of the subnormal range.
    const uint32_t significand = (magnitude_bits & 0x007fffffu) | 0x00800000u;
    const int shift = 23 + kMinNormalExponent - kMantissaBits - exponent;
    return ShiftRightRoundEven(significand, shift);
  }
  // Normal: move the exponent to the target bias, then drop mantissa bits. A carry out of the
  // mantissa correctly bumps the exponent field.
  const uint32_t rebiased = magnitude_bits - (uint32_t(127 - kBias) << 23);
  return ShiftRightRoundEven(rebiased, 23 - kMantissaBits);
}

// The value of a finite magnitude code (no NaN/inf codes: the caller screens those).
template <int kMantissaBits, int kBias>
constexpr float DecodeMagnitude(uint32_t magnitude_code) {
  const uint32_t exponent_field = magnitude_code >> kMantissaBits;
  const uint32_t mantissa = magnitude_code & ((1u << kMantissaBits) - 1u);
  if (exponent_field == 0) {
    return float(mantissa) * ExactPow2(1 - kBias - kMantissaBits);  // subnormal (or zero)
  }
  return std::bit_cast<float>(((exponent_field - kBias + 127u) << 23) |
                              (mantissa << (23 - kMantissaBits)));
}

}  // namespace minifloat
}  // namespace
}  // namespace mlaserve
