// fp8.h against the OCP definitions: every code of E4M3, E5M2, E8M0 and UE4M3 decoded by an
// independent formula and round-tripped; ties to even at every midpoint; saturation, subnormal
// boundaries, NaN; and the encoders against a brute-force nearest-code search.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kvcache/fp8.h"
#include "minifloat_test_util.h"

namespace mlaserve {
namespace {

using namespace testing_minifloat;  // NOLINT: the shared references of these tests

// Same value, or both NaN; +0 and -0 are told apart.
void ExpectSameFloat(float expected, float actual, int code) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << "code " << code;
  } else {
    EXPECT_EQ(expected, actual) << "code " << code;
    EXPECT_EQ(std::signbit(expected), std::signbit(actual)) << "code " << code;
  }
}

// The OCP formula, written out with ldexp: (-1)^s * 2^(e - bias) * (1 + m / 2^M), or
// 2^(1 - bias) * m / 2^M for e == 0. Special codes are handled by the callers.
double OcpValue(int code, int mantissa_bits, int bias) {
  const int sign = (code >> 7) & 1;
  const int exponent = (code & 0x7f) >> mantissa_bits;
  const int mantissa = code & ((1 << mantissa_bits) - 1);
  const double fraction = double(mantissa) / double(1 << mantissa_bits);
  const double magnitude = exponent == 0 ? std::ldexp(fraction, 1 - bias)
                                         : std::ldexp(1.0 + fraction, exponent - bias);
  return sign ? -magnitude : magnitude;
}

SignMagnitudeCodes E4M3Codes() {
  return PositiveCodes([](int c) { return E4M3ToF32(uint8_t(c)); }, kE4M3MaxCode, 0x80);
}
SignMagnitudeCodes E5M2Codes() {
  return PositiveCodes([](int c) { return E5M2ToF32(uint8_t(c)); }, kE5M2MaxCode, 0x80);
}

// ---- E4M3 -------------------------------------------------------------------------------

TEST(Fp8E4M3, EveryCodeDecodesToTheOcpValue) {
  for (int code = 0; code < 256; ++code) {
    const bool is_nan = (code & 0x7f) == 0x7f;
    const float expected = is_nan ? kNan : float(OcpValue(code, 3, 7));
    ExpectSameFloat(expected, E4M3ToF32(uint8_t(code)), code);
    ExpectSameFloat(expected, kE4M3ToF32[size_t(code)], code);
  }
  EXPECT_EQ(E4M3ToF32(0x7E), 448.0f);
  EXPECT_EQ(E4M3ToF32(0x01), 0.001953125f);  // 2^-9, the smallest subnormal
  EXPECT_EQ(E4M3ToF32(0x08), 0.015625f);     // 2^-6, the smallest normal
}

TEST(Fp8E4M3, EveryCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    const uint8_t again = F32ToE4M3(E4M3ToF32(uint8_t(code)));
    if ((code & 0x7f) == 0x7f) {
      EXPECT_EQ(again, code) << "NaN keeps its sign and stays the E4M3 NaN";
    } else {
      EXPECT_EQ(again, code);
    }
  }
  EXPECT_EQ(F32ToE4M3(0.0f), 0x00);
  EXPECT_EQ(F32ToE4M3(-0.0f), 0x80);
}

TEST(Fp8E4M3, HandCheckedValues) {
  EXPECT_EQ(F32ToE4M3(448.0f), 0x7E);
  EXPECT_EQ(F32ToE4M3(0.001953125f), 0x01);
  EXPECT_EQ(F32ToE4M3(1.0f), 0x38);
  EXPECT_EQ(F32ToE4M3(0.5f), 0x30);
  EXPECT_EQ(F32ToE4M3(-2.0f), 0xC0);
  EXPECT_EQ(F32ToE4M3(240.0f), 0x77);  // the "fnuz" max is an ordinary value here
  EXPECT_EQ(F32ToE4M3(-448.0f), 0xFE);
  EXPECT_EQ(F32ToE4M3(1.0625f), 0x38);  // tie between 1 (0x38) and 1.125 (0x39): even
  EXPECT_EQ(F32ToE4M3(1.1875f), 0x3A);  // tie between 1.125 (0x39) and 1.25 (0x3A): even
}

TEST(Fp8E4M3, TiesGoToEvenBetweenEveryPairOfAdjacentCodes) {
  ExpectTiesToEvenBetweenAdjacentCodes(E4M3Codes(), F32ToE4M3, /*check_negative=*/true);
}

TEST(Fp8E4M3, SaturatesPastTheMax) {
  for (float v : {448.0f, 463.99997f, 464.0f, 464.00003f, 480.0f, 512.0f, 1e6f, FLT_MAX, kInf}) {
    EXPECT_EQ(F32ToE4M3(v), 0x7E) << v;
    EXPECT_EQ(F32ToE4M3(-v), 0xFE) << -v;
  }
  // The top binade: 384 (0x7C), 416 (0x7D), 448 (0x7E).
  EXPECT_EQ(F32ToE4M3(400.0f), 0x7C);  // tie: even
  EXPECT_EQ(F32ToE4M3(416.0f), 0x7D);
  EXPECT_EQ(F32ToE4M3(432.0f), 0x7E);  // tie: even
  EXPECT_EQ(F32ToE4M3(447.0f), 0x7E);
}

TEST(Fp8E4M3, SubnormalBoundaries) {
  const float min_subnormal = std::ldexp(1.0f, -9);
  EXPECT_EQ(F32ToE4M3(min_subnormal), 0x01);
  EXPECT_EQ(F32ToE4M3(min_subnormal / 2), 0x00);  // tie with zero: even
  EXPECT_EQ(F32ToE4M3(-min_subnormal / 2), 0x80);
  EXPECT_EQ(F32ToE4M3(std::nextafter(min_subnormal / 2, 1.0f)), 0x01);
  EXPECT_EQ(F32ToE4M3(7 * min_subnormal), 0x07);  // the largest subnormal
  EXPECT_EQ(F32ToE4M3(std::ldexp(1.0f, -6)), 0x08);  // the smallest normal
  // 7.5 * 2^-9 is the tie between the largest subnormal (odd) and the smallest normal (even).
  EXPECT_EQ(F32ToE4M3(7.5f * min_subnormal), 0x08);
  EXPECT_EQ(F32ToE4M3(std::nextafter(7.5f * min_subnormal, 0.0f)), 0x07);
  EXPECT_EQ(F32ToE4M3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(F32ToE4M3(-FLT_MIN), 0x80);
}

TEST(Fp8E4M3, NanGivesNan) {
  EXPECT_EQ(F32ToE4M3(kNan), 0x7F);
  EXPECT_EQ(F32ToE4M3(-kNan), 0xFF);
  EXPECT_EQ(F32ToE4M3(std::bit_cast<float>(0x7f800001u)), 0x7F);  // signalling NaN
  EXPECT_TRUE(std::isnan(E4M3ToF32(0x7F)));
  EXPECT_TRUE(std::isnan(E4M3ToF32(0xFF)));
}

TEST(Fp8E4M3, MatchesBruteForceNearestCode) {
  const SignMagnitudeCodes codes = E4M3Codes();
  for (float x : SweepInputs(codes, 1)) {
    ASSERT_EQ(uint32_t(F32ToE4M3(x)), NearestCodeBruteForce(codes, x)) << x;
  }
}

// ---- E5M2 -------------------------------------------------------------------------------

TEST(Fp8E5M2, EveryCodeDecodesToTheOcpValue) {
  for (int code = 0; code < 256; ++code) {
    const int magnitude = code & 0x7f;
    float expected;
    if (magnitude > 0x7C) {
      expected = kNan;
    } else if (magnitude == 0x7C) {
      expected = (code & 0x80) ? -kInf : kInf;
    } else {
      expected = float(OcpValue(code, 2, 15));
    }
    ExpectSameFloat(expected, E5M2ToF32(uint8_t(code)), code);
    ExpectSameFloat(expected, kE5M2ToF32[size_t(code)], code);
  }
  EXPECT_EQ(E5M2ToF32(0x7B), 57344.0f);
}

TEST(Fp8E5M2, EveryCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    const float value = E5M2ToF32(uint8_t(code));
    const int magnitude = code & 0x7f;
    if (magnitude > 0x7C) {
      EXPECT_GT(F32ToE5M2(value) & 0x7f, 0x7C) << code;  // a NaN code
      EXPECT_GT(F32ToE5M2OverflowToInf(value) & 0x7f, 0x7C) << code;
    } else if (magnitude == 0x7C) {
      EXPECT_EQ(F32ToE5M2(value), (code & 0x80) | 0x7B) << "saturating: inf -> max";
      EXPECT_EQ(F32ToE5M2OverflowToInf(value), code);
    } else {
      EXPECT_EQ(F32ToE5M2(value), code);
      EXPECT_EQ(F32ToE5M2OverflowToInf(value), code);
    }
  }
  EXPECT_EQ(F32ToE5M2(-0.0f), 0x80);
}

TEST(Fp8E5M2, HandCheckedValues) {
  EXPECT_EQ(F32ToE5M2(57344.0f), 0x7B);
  EXPECT_EQ(F32ToE5M2(1.0f), 0x3C);
  EXPECT_EQ(F32ToE5M2(-1.5f), 0xBE);
  EXPECT_EQ(F32ToE5M2(std::ldexp(1.0f, -16)), 0x01);  // smallest subnormal
  EXPECT_EQ(F32ToE5M2(std::ldexp(1.0f, -14)), 0x04);  // smallest normal
  EXPECT_EQ(F32ToE5M2(std::ldexp(1.0f, -17)), 0x00);  // tie with zero: even
  EXPECT_EQ(F32ToE5M2(std::ldexp(3.5f, -16)), 0x04);  // tie 0x03 / 0x04: even
}

TEST(Fp8E5M2, TiesGoToEvenBetweenEveryPairOfAdjacentCodes) {
  ExpectTiesToEvenBetweenAdjacentCodes(E5M2Codes(), F32ToE5M2, true);
  ExpectTiesToEvenBetweenAdjacentCodes(E5M2Codes(), F32ToE5M2OverflowToInf, true);
}

TEST(Fp8E5M2, SaturatingVariantClampsOverflowAndInfinity) {
  for (float v : {57344.0f, 61439.996f, 61440.0f, 65536.0f, 1e10f, FLT_MAX, kInf}) {
    EXPECT_EQ(F32ToE5M2(v), 0x7B) << v;
    EXPECT_EQ(F32ToE5M2(-v), 0xFB) << -v;
  }
}

TEST(Fp8E5M2, OverflowToInfVariantFollowsIeee) {
  EXPECT_EQ(F32ToE5M2OverflowToInf(57344.0f), 0x7B);
  EXPECT_EQ(F32ToE5M2OverflowToInf(61439.996f), 0x7B);  // below max + half an ulp
  EXPECT_EQ(F32ToE5M2OverflowToInf(61440.0f), 0x7C);    // the tie rounds to even: inf
  EXPECT_EQ(F32ToE5M2OverflowToInf(-1e10f), 0xFC);
  EXPECT_EQ(F32ToE5M2OverflowToInf(kInf), 0x7C);
  EXPECT_EQ(F32ToE5M2OverflowToInf(-kInf), 0xFC);
}

TEST(Fp8E5M2, NanGivesNan) {
  EXPECT_EQ(F32ToE5M2(kNan), 0x7E);
  EXPECT_EQ(F32ToE5M2(-kNan), 0xFE);
  EXPECT_EQ(F32ToE5M2OverflowToInf(kNan), 0x7E);
  for (int code : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) {
    EXPECT_TRUE(std::isnan(E5M2ToF32(uint8_t(code)))) << code;
  }
}

TEST(Fp8E5M2, MatchesBruteForceNearestCode) {
  const SignMagnitudeCodes codes = E5M2Codes();
  for (float x : SweepInputs(codes, 2)) {
    ASSERT_EQ(uint32_t(F32ToE5M2(x)), NearestCodeBruteForce(codes, x)) << x;
    const uint32_t expected_ieee = std::fabs(x) >= 61440.0f
                                       ? (std::signbit(x) ? 0xFCu : 0x7Cu)
                                       : NearestCodeBruteForce(codes, x);
    ASSERT_EQ(uint32_t(F32ToE5M2OverflowToInf(x)), expected_ieee) << x;
  }
}

// ---- E8M0 -------------------------------------------------------------------------------

TEST(Fp8E8M0, EveryCodeDecodesToAPowerOfTwo) {
  for (int code = 0; code < 255; ++code) {
    EXPECT_EQ(double(E8M0ToF32(uint8_t(code))), std::ldexp(1.0, code - 127)) << code;
    EXPECT_EQ(kE8M0ToF32[size_t(code)], E8M0ToF32(uint8_t(code))) << code;
  }
  EXPECT_TRUE(std::isnan(E8M0ToF32(0xFF)));
  EXPECT_TRUE(std::isnan(kE8M0ToF32[0xFF]));
  EXPECT_EQ(E8M0ToF32(127), 1.0f);
}

TEST(Fp8E8M0, EveryCodeRoundTripsBothWays) {
  for (int code = 0; code < 255; ++code) {
    const float value = E8M0ToF32(uint8_t(code));
    EXPECT_EQ(F32ToE8M0Floor(value), code);
    EXPECT_EQ(F32ToE8M0Ceil(value), code);
  }
  EXPECT_EQ(F32ToE8M0Floor(kNan), 0xFF);
  EXPECT_EQ(F32ToE8M0Ceil(kNan), 0xFF);
}

TEST(Fp8E8M0, FloorAndCeilBracketOtherValues) {
  for (int exponent = -126; exponent < 127; ++exponent) {
    for (float fraction : {1.0000001f, 1.5f, 1.9999999f}) {
      const float value = std::ldexp(fraction, exponent);
      EXPECT_EQ(F32ToE8M0Floor(value), exponent + 127) << value;
      EXPECT_EQ(F32ToE8M0Ceil(value), exponent + 128) << value;
    }
  }
  // Below 2^-127, between 2^-127 and 2^-126 (fp32 subnormals), and the clamps.
  EXPECT_EQ(F32ToE8M0Floor(std::ldexp(1.0f, -140)), 0);
  EXPECT_EQ(F32ToE8M0Ceil(std::ldexp(1.0f, -140)), 0);
  EXPECT_EQ(F32ToE8M0Floor(std::ldexp(1.5f, -127)), 0);
  EXPECT_EQ(F32ToE8M0Ceil(std::ldexp(1.5f, -127)), 1);
  for (float v : {0.0f, -0.0f, -1.0f, -kInf}) {
    EXPECT_EQ(F32ToE8M0Floor(v), 0) << v;
    EXPECT_EQ(F32ToE8M0Ceil(v), 0) << v;
  }
  for (float v : {std::ldexp(1.5f, 127), FLT_MAX, kInf}) {
    EXPECT_EQ(F32ToE8M0Floor(v), 0xFE) << v;
    EXPECT_EQ(F32ToE8M0Ceil(v), 0xFE) << v;
  }
  EXPECT_EQ(E8M0FromExponent(0), 127);
  EXPECT_EQ(E8M0FromExponent(-127), 0);
  EXPECT_EQ(E8M0FromExponent(-500), 0);
  EXPECT_EQ(E8M0FromExponent(127), 0xFE);
  EXPECT_EQ(E8M0FromExponent(500), 0xFE);
}

// ---- UE4M3 ------------------------------------------------------------------------------

TEST(Fp8UE4M3, EveryCodeDecodesAsE4M3WithoutTheSignBit) {
  for (int code = 0; code < 256; ++code) {
    const float expected = E4M3ToF32(uint8_t(code & 0x7f));
    ExpectSameFloat(expected, UE4M3ToF32(uint8_t(code)), code);
    ExpectSameFloat(expected, kUE4M3ToF32[size_t(code)], code);
    const uint8_t again = F32ToUE4M3(UE4M3ToF32(uint8_t(code)));
    EXPECT_EQ(again, code & 0x7f) << code;  // NaN codes come back as 0x7F
  }
}

TEST(Fp8UE4M3, RoundsSaturatesAndClampsNegativesToZero) {
  ExpectTiesToEvenBetweenAdjacentCodes(E4M3Codes(), F32ToUE4M3, /*check_negative=*/false);
  for (float v : {464.0f, 1e9f, kInf}) EXPECT_EQ(F32ToUE4M3(v), 0x7E) << v;
  for (float v : {-0.0f, -1.0f, -kInf}) EXPECT_EQ(F32ToUE4M3(v), 0x00) << v;
  EXPECT_EQ(F32ToUE4M3(kNan), 0x7F);
  EXPECT_EQ(F32ToUE4M3(-kNan), 0x7F);
  EXPECT_EQ(F32ToUE4M3(1.0f), 0x38);
}

}  // namespace
}  // namespace mlaserve
