// The 8-bit number formats of the KV cache, bit for bit as the OCP specs define them:
//   E4M3 ("FN", OCP 8-bit FP spec v1.0): bias 7, max 448 (0x7E), no infinity, NaN = S.1111.111.
//   E5M2 (same spec): bias 15, max 57344 (0x7B), infinity S.11111.00, NaN S.11111.{01,10,11}.
//   E8M0 (OCP MX spec v1.0 scale): unsigned, 2^(code - 127), 0xFF = NaN, no zero.
//   UE4M3 (NVFP4 block scale): E4M3 used as an unsigned positive scale; bit 7 is not part of
//     the value (the encoder never sets it, the decoder ignores it), 0x7F = NaN.
// fp32 -> code rounds to nearest, ties to even, subnormals included, and saturates: overflow
// and +-inf become +-max finite, because a KV cache wants a large value, not inf/NaN. NaN stays
// NaN. Decoding is exact; the 256-entry tables are the fast path for tiles of codes.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <limits>

#include "kvcache/minifloat.h"

namespace mlaserve {
// Internal linkage on purpose: see core/float16.h.
namespace {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;
inline constexpr uint8_t kE4M3MaxCode = 0x7E;  // +448
inline constexpr uint8_t kE4M3NanCode = 0x7F;  // the only NaN codes: 0x7F, 0xFF
inline constexpr uint8_t kE5M2MaxCode = 0x7B;  // +57344
inline constexpr uint8_t kE5M2InfCode = 0x7C;  // +inf; 0xFC is -inf
inline constexpr uint8_t kE5M2NanCode = 0x7E;  // the quiet NaN this encoder emits (sign kept)
inline constexpr uint8_t kE8M0NanCode = 0xFF;
inline constexpr uint8_t kE8M0MaxCode = 0xFE;  // 2^127
inline constexpr uint8_t kE8M0OneCode = 0x7F;  // 2^0

namespace fp8_internal {

constexpr uint32_t SignByte(uint32_t f32_bits) { return (f32_bits >> 24) & 0x80u; }
constexpr uint32_t Magnitude(uint32_t f32_bits) { return f32_bits & 0x7fffffffu; }
constexpr bool IsNanBits(uint32_t f32_bits) { return Magnitude(f32_bits) > 0x7f800000u; }
constexpr float WithSign(float magnitude, uint8_t code) {
  return (code & 0x80u) ? -magnitude : magnitude;
}

// A NaN whose sign follows the code's sign bit (constant-evaluable, unlike std::copysign).
constexpr float SignedNan(uint8_t code) {
  return std::bit_cast<float>((code & 0x80u) ? 0xffc00000u : 0x7fc00000u);
}

// Rounds to the nearest code (ties to even); NaN -> sign | nan_code; a magnitude past max_code
// (including inf) -> sign | overflow_code, which is max_code to saturate or an inf code.
template <int kMantissaBits, int kBias>
constexpr uint8_t Encode(float value, uint32_t nan_code, uint32_t max_code,
                         uint32_t overflow_code) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = SignByte(bits);
  if (IsNanBits(bits)) return uint8_t(sign | nan_code);
  const uint32_t code = minifloat::RoundMagnitudeToCode<kMantissaBits, kBias>(Magnitude(bits));
  return uint8_t(sign | (code > max_code ? overflow_code : code));
}

}  // namespace fp8_internal

// ---- E4M3 -------------------------------------------------------------------------------

// Saturating: |x| past 448 (after rounding) and +-inf give +-448; NaN gives 0x7F/0xFF by sign.
constexpr uint8_t F32ToE4M3(float value) {
  return fp8_internal::Encode<3, 7>(value, kE4M3NanCode, kE4M3MaxCode, kE4M3MaxCode);
}

constexpr float E4M3ToF32(uint8_t code) {
  if ((code & 0x7fu) == kE4M3NanCode) return fp8_internal::SignedNan(code);
  return fp8_internal::WithSign(minifloat::DecodeMagnitude<3, 7>(code & 0x7fu), code);
}

// ---- E5M2 -------------------------------------------------------------------------------

// Saturating, the KV-cache default: overflow past 57344 and +-inf itself give +-57344 (an inf in
// the cache would turn every score it touches into inf/NaN). NaN gives a quiet NaN (0x7E/0xFE).
constexpr uint8_t F32ToE5M2(float value) {
  return fp8_internal::Encode<2, 15>(value, kE5M2NanCode, kE5M2MaxCode, kE5M2MaxCode);
}

// IEEE-style (OCP "non-saturating"): overflow rounds to +-inf as IEEE would (|x| >= 61440, the
// midpoint past the max, is inf), +-inf stays +-inf, NaN gives a quiet NaN.
constexpr uint8_t F32ToE5M2OverflowToInf(float value) {
  return fp8_internal::Encode<2, 15>(value, kE5M2NanCode, kE5M2MaxCode, kE5M2InfCode);
}

constexpr float E5M2ToF32(uint8_t code) {
  const uint32_t magnitude_code = code & 0x7fu;
  if (magnitude_code > kE5M2InfCode) return fp8_internal::SignedNan(code);
  if (magnitude_code == kE5M2InfCode) {
    return fp8_internal::WithSign(std::numeric_limits<float>::infinity(), code);
  }
  return fp8_internal::WithSign(minifloat::DecodeMagnitude<2, 15>(magnitude_code), code);
}

// ---- E8M0 (power-of-two scale) ----------------------------------------------------------

// The code of 2^exponent, clamped to the representable 2^-127 .. 2^127.
constexpr uint8_t E8M0FromExponent(int exponent) {
  if (exponent < -127) exponent = -127;
  if (exponent > 127) exponent = 127;
  return uint8_t(exponent + 127);
}

constexpr float E8M0ToF32(uint8_t code) {
  if (code == kE8M0NanCode) return std::numeric_limits<float>::quiet_NaN();
  if (code == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127, an fp32 subnormal
  return std::bit_cast<float>(uint32_t(code) << 23);
}

// E8M0 holds only powers of two, so "nearest" depends on the use. Scale rules say which way:
// OCP MX rounds the exponent down, SGLang's fp4 and FlashMLA's fp8 scales round up. Both
// saturate to 2^-127 .. 2^127 (zero and negatives give 2^-127, +inf gives 2^127); NaN gives 0xFF.

// The largest power of two <= value.
constexpr uint8_t F32ToE8M0Floor(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if (fp8_internal::IsNanBits(bits)) return kE8M0NanCode;
  if (bits & 0x80000000u) return 0;  // negative (or -0): the smallest scale
  const uint32_t exponent_field = bits >> 23;  // 0 for fp32 subnormals: floor is <= -127
  return uint8_t(exponent_field > kE8M0MaxCode ? kE8M0MaxCode : exponent_field);
}

// The smallest power of two >= value.
constexpr uint8_t F32ToE8M0Ceil(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if (fp8_internal::IsNanBits(bits)) return kE8M0NanCode;
  if (bits & 0x80000000u) return 0;
  if (bits <= 0x00400000u) return 0;  // (0, 2^-127]
  if (bits < 0x00800000u) return 1;   // (2^-127, 2^-126)
  const uint32_t exponent_field = bits >> 23;
  const uint32_t code = exponent_field + ((bits & 0x007fffffu) ? 1u : 0u);
  return uint8_t(code > kE8M0MaxCode ? kE8M0MaxCode : code);
}

// ---- UE4M3 (NVFP4 block scale) ----------------------------------------------------------

// Saturating to 448; zero, negatives and -inf give 0 (a scale is never negative); NaN gives 0x7F.
constexpr uint8_t F32ToUE4M3(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if (fp8_internal::IsNanBits(bits)) return kE4M3NanCode;
  if (bits & 0x80000000u) return 0;
  return F32ToE4M3(value);
}

constexpr float UE4M3ToF32(uint8_t code) { return E4M3ToF32(uint8_t(code & 0x7fu)); }

// ---- Decode tables ----------------------------------------------------------------------

namespace fp8_internal {
template <float (*kDecode)(uint8_t)>
constexpr std::array<float, 256> MakeTable() {
  std::array<float, 256> table{};
  for (int code = 0; code < 256; ++code) table[size_t(code)] = kDecode(uint8_t(code));
  return table;
}
}  // namespace fp8_internal

// [256] code -> fp32, identical to the scalar decoders (NaN codes hold NaN).
inline constexpr std::array<float, 256> kE4M3ToF32 = fp8_internal::MakeTable<E4M3ToF32>();
inline constexpr std::array<float, 256> kE5M2ToF32 = fp8_internal::MakeTable<E5M2ToF32>();
inline constexpr std::array<float, 256> kE8M0ToF32 = fp8_internal::MakeTable<E8M0ToF32>();
inline constexpr std::array<float, 256> kUE4M3ToF32 = fp8_internal::MakeTable<UE4M3ToF32>();

}  // namespace
}  // namespace mlaserve
