// Independent references for the fp8/fp4 tests: the nearest code found by scanning every code's
// decoded value (no bit tricks), the midpoint checks between adjacent codes, and a spread of
// fp32 inputs that reaches every binade, every bf16 value and every subnormal boundary.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace mlaserve::testing_minifloat {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// A sign-magnitude format's positive finite codes 0..max_code, ascending in value, and its sign
// bit. Codes above max_code (inf/NaN) are not candidates: saturation clamps to max_code.
struct SignMagnitudeCodes {
  std::vector<float> positive_values;  // [max_code + 1], index = code
  uint32_t sign_bit = 0x80;
};

template <typename Decode>
SignMagnitudeCodes PositiveCodes(Decode decode, int max_code, uint32_t sign_bit) {
  SignMagnitudeCodes codes;
  codes.sign_bit = sign_bit;
  for (int code = 0; code <= max_code; ++code) codes.positive_values.push_back(decode(code));
  return codes;
}

// Round to nearest, ties to the even code, saturating to the largest finite code; the sign of
// x (including -0) goes to the sign bit. x must not be NaN.
inline uint32_t NearestCodeBruteForce(const SignMagnitudeCodes& codes, float x) {
  const uint32_t sign = std::signbit(x) ? codes.sign_bit : 0u;
  double magnitude = std::fabs(double(x));
  const double max_value = codes.positive_values.back();
  if (magnitude > max_value) magnitude = max_value;
  uint32_t best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (uint32_t code = 0; code < codes.positive_values.size(); ++code) {
    const double distance = std::fabs(magnitude - double(codes.positive_values[code]));
    if (distance < best_distance || (distance == best_distance && (code & 1u) == 0)) {
      best = code;
      best_distance = distance;
    }
  }
  return sign | best;
}

// Inputs that exercise every rounding path: every bf16 bit pattern (all binades, both signs,
// inf, NaN removed), the decoded values of the format and their neighbours, and random fp32
// values with random exponents.
inline std::vector<float> SweepInputs(const SignMagnitudeCodes& codes, uint32_t seed) {
  std::vector<float> inputs;
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const float value = std::bit_cast<float>(bits << 16);
    if (!std::isnan(value)) inputs.push_back(value);
  }
  for (float v : codes.positive_values) {
    for (float w : {v, std::nextafter(v, 0.0f), std::nextafter(v, 1e30f)}) {
      inputs.push_back(w);
      inputs.push_back(-w);
    }
  }
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> exponent(-30, 20);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int i = 0; i < 100000; ++i) {
    const float value = std::ldexp(mantissa(rng), exponent(rng));
    inputs.push_back((i & 1) ? -value : value);
  }
  return inputs;
}

// For every pair of adjacent positive codes (lo, lo+1): the exact midpoint goes to the even
// code, the next fp32 above it to lo+1, the next below it to lo; the same mirrored for negative
// inputs. `encode` maps fp32 -> code.
template <typename Encode>
void ExpectTiesToEvenBetweenAdjacentCodes(const SignMagnitudeCodes& codes, Encode encode,
                                          bool check_negative) {
  for (uint32_t lo = 0; lo + 1 < codes.positive_values.size(); ++lo) {
    const float a = codes.positive_values[lo], b = codes.positive_values[lo + 1];
    const float midpoint = (a + b) / 2;  // exact: both have a few significant bits
    ASSERT_EQ(double(midpoint), (double(a) + double(b)) / 2) << "code " << lo;
    const uint32_t even = (lo & 1u) ? lo + 1 : lo;
    EXPECT_EQ(uint32_t(encode(midpoint)), even) << "midpoint of codes " << lo << ", " << lo + 1;
    EXPECT_EQ(uint32_t(encode(std::nextafter(midpoint, b))), lo + 1) << "above midpoint " << lo;
    EXPECT_EQ(uint32_t(encode(std::nextafter(midpoint, a))), lo) << "below midpoint " << lo;
    if (check_negative) {
      EXPECT_EQ(uint32_t(encode(-midpoint)), codes.sign_bit | even) << "-midpoint " << lo;
      EXPECT_EQ(uint32_t(encode(-std::nextafter(midpoint, b))), codes.sign_bit | (lo + 1));
      EXPECT_EQ(uint32_t(encode(-std::nextafter(midpoint, a))), codes.sign_bit | lo);
    }
  }
}

}  // namespace mlaserve::testing_minifloat
