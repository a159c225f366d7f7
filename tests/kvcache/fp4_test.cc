// fp4.h: every E2M1 code, ties to even at every midpoint, saturation, the NaN rule, the
// nibble packing and the pair table, and the encoder against a brute-force nearest-code search.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kvcache/fp4.h"
#include "minifloat_test_util.h"

namespace mlaserve {
namespace {

using namespace testing_minifloat;  // NOLINT: the shared references of these tests

SignMagnitudeCodes E2M1Codes() {
  return PositiveCodes([](int c) { return E2M1ToF32(uint8_t(c)); }, kE2M1MaxCode, 0x8);
}

TEST(Fp4E2M1, EveryCodeDecodesToTheOcpValue) {
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int code = 0; code < 16; ++code) {
    const float expected = (code & 8) ? -magnitudes[code & 7] : magnitudes[code & 7];
    EXPECT_EQ(E2M1ToF32(uint8_t(code)), expected) << code;
    EXPECT_EQ(std::signbit(E2M1ToF32(uint8_t(code))), (code & 8) != 0) << code;
    EXPECT_EQ(kE2M1ToF32[size_t(code)], expected) << code;
  }
}

TEST(Fp4E2M1, EveryCodeRoundTrips) {
  for (int code = 0; code < 16; ++code) {
    EXPECT_EQ(F32ToE2M1(E2M1ToF32(uint8_t(code))), code);  // 0x8 is -0 and stays -0
  }
}

TEST(Fp4E2M1, HandCheckedValues) {
  EXPECT_EQ(F32ToE2M1(0.5f), 0x1);
  EXPECT_EQ(F32ToE2M1(1.0f), 0x2);
  EXPECT_EQ(F32ToE2M1(1.5f), 0x3);
  EXPECT_EQ(F32ToE2M1(3.0f), 0x5);
  EXPECT_EQ(F32ToE2M1(6.0f), 0x7);
  EXPECT_EQ(F32ToE2M1(-6.0f), 0xF);
  EXPECT_EQ(F32ToE2M1(-0.5f), 0x9);
  EXPECT_EQ(F32ToE2M1(0.25f), 0x0);  // tie with zero: even
  EXPECT_EQ(F32ToE2M1(0.75f), 0x2);  // tie 0.5 / 1.0: even (1.0)
  EXPECT_EQ(F32ToE2M1(2.5f), 0x4);   // tie 2 / 3: even (2)
  EXPECT_EQ(F32ToE2M1(5.0f), 0x6);   // tie 4 / 6: even (4)
  EXPECT_EQ(F32ToE2M1(5.0001f), 0x7);
}

TEST(Fp4E2M1, TiesGoToEvenBetweenEveryPairOfAdjacentCodes) {
  ExpectTiesToEvenBetweenAdjacentCodes(E2M1Codes(), F32ToE2M1, /*check_negative=*/true);
}

TEST(Fp4E2M1, SaturatesPastTheMax) {
  for (float v : {6.0f, 6.5f, 7.0f, 8.0f, 1e6f, FLT_MAX, kInf}) {
    EXPECT_EQ(F32ToE2M1(v), 0x7) << v;
    EXPECT_EQ(F32ToE2M1(-v), 0xF) << -v;
  }
}

TEST(Fp4E2M1, SubnormalAndTinyValues) {
  EXPECT_EQ(F32ToE2M1(std::nextafter(0.25f, 1.0f)), 0x1);
  EXPECT_EQ(F32ToE2M1(std::nextafter(0.25f, 0.0f)), 0x0);
  EXPECT_EQ(F32ToE2M1(-0.1f), 0x8);  // rounds to -0
  EXPECT_EQ(F32ToE2M1(std::numeric_limits<float>::denorm_min()), 0x0);
}

// E2M1 has no NaN code; the scalar maps NaN to +0 (the row codecs flag NaN by the block scale).
TEST(Fp4E2M1, NanBecomesPositiveZero) {
  EXPECT_EQ(F32ToE2M1(kNan), 0x0);
  EXPECT_EQ(F32ToE2M1(-kNan), 0x0);
}

TEST(Fp4E2M1, MatchesBruteForceNearestCode) {
  const SignMagnitudeCodes codes = E2M1Codes();
  for (float x : SweepInputs(codes, 3)) {
    ASSERT_EQ(uint32_t(F32ToE2M1(x)), NearestCodeBruteForce(codes, x)) << x;
  }
}

TEST(Fp4E2M1, PairTableAndPackingPutTheFirstElementInTheLowNibble) {
  for (int byte = 0; byte < 256; ++byte) {
    EXPECT_EQ(kE2M1PairToF32[size_t(2 * byte)], E2M1ToF32(uint8_t(byte & 0xf))) << byte;
    EXPECT_EQ(kE2M1PairToF32[size_t(2 * byte + 1)], E2M1ToF32(uint8_t(byte >> 4))) << byte;
    EXPECT_EQ(PackE2M1Pair(uint8_t(byte & 0xf), uint8_t(byte >> 4)), byte);
  }
  EXPECT_EQ(PackE2M1Pair(F32ToE2M1(0.5f), F32ToE2M1(-6.0f)), 0xF1);
}

}  // namespace
}  // namespace mlaserve
