// kv_format: --kv-cache-dtype parsing, row sizes against REFERENCE.md section 3, the layouts
// (read back by an independent decoder written from the documented byte offsets), the error
// bounds of every codec on random rows with outliers, the scale rules, zeros, NaN and inf.
#include "kvcache/kv_format.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/float16.h"
#include "kvcache/fp4.h"
#include "kvcache/fp8.h"

namespace mlaserve {
namespace {

constexpr KvFormat kAllFormats[] = {
    KvFormat::kF32,      KvFormat::kBF16,    KvFormat::kFP16,
    KvFormat::kFP8E4M3,  KvFormat::kFP8E5M2, KvFormat::kFP8DsMla,
    KvFormat::kFP4E2M1,  KvFormat::kMXFP4,   KvFormat::kNVFP4,
};

struct Dims {
  int latent;
  int rope;
};
// DeepSeek-V3, the bundled model's latent, test sizes, and ragged last blocks.
constexpr Dims kDims[] = {{512, 64}, {128, 32}, {64, 16}, {32, 8}, {64, 8}, {200, 10}};

bool IsFp4(KvFormat f) {
  return f == KvFormat::kFP4E2M1 || f == KvFormat::kMXFP4 || f == KvFormat::kNVFP4;
}

// ---- Parsing and names ------------------------------------------------------------------

TEST(KvFormatParse, AcceptsSglangAndVllmSpellings) {
  const struct {
    const char* name;
    KvFormat format;
  } cases[] = {
      {"bf16", KvFormat::kBF16},          {"bfloat16", KvFormat::kBF16},
      {"fp16", KvFormat::kFP16},          {"float16", KvFormat::kFP16},
      {"fp32", KvFormat::kF32},           {"float32", KvFormat::kF32},
      {"fp8", KvFormat::kFP8E4M3},        {"fp8_e4m3", KvFormat::kFP8E4M3},
      {"fp8_e5m2", KvFormat::kFP8E5M2},   {"fp8_ds_mla", KvFormat::kFP8DsMla},
      {"fp8_flashmla", KvFormat::kFP8DsMla}, {"fp4_e2m1", KvFormat::kFP4E2M1},
      {"mxfp4", KvFormat::kMXFP4},        {"nvfp4", KvFormat::kNVFP4},
      {"FP8_E4M3", KvFormat::kFP8E4M3},   {"BF16", KvFormat::kBF16},
  };
  for (const auto& c : cases) {
    const Result<KvFormat> parsed = ParseKvCacheDtype(c.name, "bfloat16");
    ASSERT_TRUE(parsed.ok()) << c.name << ": " << parsed.error();
    EXPECT_EQ(parsed.value(), c.format) << c.name;
  }
}

TEST(KvFormatParse, AutoFollowsTheModelDtype) {
  const struct {
    const char* model_dtype;
    KvFormat format;
  } cases[] = {
      {"bfloat16", KvFormat::kBF16}, {"bf16", KvFormat::kBF16}, {"BF16", KvFormat::kBF16},
      {"float16", KvFormat::kFP16},  {"F16", KvFormat::kFP16},  {"half", KvFormat::kFP16},
      {"float32", KvFormat::kBF16},  {"F32", KvFormat::kBF16},  {"", KvFormat::kBF16},
      {"float8_e4m3fn", KvFormat::kBF16},
  };
  for (const auto& c : cases) {
    const Result<KvFormat> parsed = ParseKvCacheDtype("auto", c.model_dtype);
    ASSERT_TRUE(parsed.ok()) << c.model_dtype << ": " << parsed.error();
    EXPECT_EQ(parsed.value(), c.format) << c.model_dtype;
  }
  const Result<KvFormat> bad = ParseKvCacheDtype("AUTO", "int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("'int8'"), std::string::npos) << bad.error();
}

TEST(KvFormatParse, UnknownNameIsAnErrorNamingItAndTheValidNames) {
  for (const char* name : {"fp8_e4m3fnuz", "int8", "", "fp4"}) {
    const Result<KvFormat> parsed = ParseKvCacheDtype(name, "bf16");
    ASSERT_FALSE(parsed.ok()) << name;
    const std::string& message = parsed.error();
    EXPECT_NE(message.find("'" + std::string(name) + "'"), std::string::npos) << message;
    for (const char* valid : {"auto", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "fp4_e2m1",
                              "mxfp4", "nvfp4"}) {
      EXPECT_NE(message.find(valid), std::string::npos) << valid << " missing in: " << message;
    }
  }
}

TEST(KvFormatParse, EveryCanonicalNameParsesBackToItsFormat) {
  for (KvFormat f : kAllFormats) {
    const Result<KvFormat> parsed = ParseKvCacheDtype(KvFormatName(f), "bf16");
    ASSERT_TRUE(parsed.ok()) << KvFormatName(f);
    EXPECT_EQ(parsed.value(), f) << KvFormatName(f);
  }
}

// ---- Sizes and layouts ------------------------------------------------------------------

TEST(KvFormatRowBytes, MatchesReferenceForDeepSeekV3) {
  EXPECT_EQ(KvRowBytes(KvFormat::kBF16, 512, 64), 1152u);
  EXPECT_EQ(KvRowBytes(KvFormat::kFP16, 512, 64), 1152u);
  EXPECT_EQ(KvRowBytes(KvFormat::kFP8E4M3, 512, 64), 576u);
  EXPECT_EQ(KvRowBytes(KvFormat::kFP8E5M2, 512, 64), 576u);
  EXPECT_EQ(KvRowBytes(KvFormat::kFP8DsMla, 512, 64), 656u);
  EXPECT_EQ(KvRowBytes(KvFormat::kFP4E2M1, 512, 64), 324u);
  EXPECT_EQ(KvRowBytes(KvFormat::kMXFP4, 512, 64), 306u);
  EXPECT_EQ(KvRowBytes(KvFormat::kNVFP4, 512, 64), 324u);
  EXPECT_EQ(KvRowBytes(KvFormat::kF32, 512, 64), 2304u);
  // Per token over DeepSeek-V3's 61 layers.
  EXPECT_EQ(61 * KvRowBytes(KvFormat::kBF16, 512, 64), 70272u);
  EXPECT_EQ(61 * KvRowBytes(KvFormat::kFP8E4M3, 512, 64), 35136u);
  EXPECT_EQ(61 * KvRowBytes(KvFormat::kFP8DsMla, 512, 64), 40016u);
  EXPECT_EQ(61 * KvRowBytes(KvFormat::kFP4E2M1, 512, 64), 19764u);
  EXPECT_EQ(61 * KvRowBytes(KvFormat::kMXFP4, 512, 64), 18666u);
  EXPECT_EQ(61 * KvRowBytes(KvFormat::kNVFP4, 512, 64), 19764u);
}

TEST(KvFormatRowBytes, OtherDims) {
  EXPECT_EQ(KvRowBytes(KvFormat::kBF16, 128, 32), 320u);
  EXPECT_EQ(KvRowBytes(KvFormat::kFP16, 64, 16), 160u);
  EXPECT_EQ(KvRowBytes(KvFormat::kBF16, 32, 8), 80u);
  EXPECT_EQ(KvRowBytes(KvFormat::kFP8E4M3, 64, 16), 80u);
  EXPECT_EQ(KvRowBytes(KvFormat::kFP8DsMla, 128, 32), 128u + 4 + 64);
  EXPECT_EQ(KvRowBytes(KvFormat::kFP8DsMla, 64, 16), 64u + 4 + 32);    // one short block
  EXPECT_EQ(KvRowBytes(KvFormat::kFP8DsMla, 200, 10), 200u + 8 + 20);  // 128 + 72
  EXPECT_EQ(KvRowBytes(KvFormat::kFP4E2M1, 64, 16), 40u + 4 + 1);
  EXPECT_EQ(KvRowBytes(KvFormat::kMXFP4, 64, 8), 36u + 2 + 1);
  EXPECT_EQ(KvRowBytes(KvFormat::kMXFP4, 128, 32), 80u + 4 + 1);
  EXPECT_EQ(KvRowBytes(KvFormat::kNVFP4, 32, 8), 20u + 2 + 1);
}

TEST(KvFormatRowBytes, LayoutOffsetsForDeepSeekV3) {
  const KvRowLayout ds = KvRowLayoutFor(KvFormat::kFP8DsMla, 512, 64);
  EXPECT_EQ(ds.scales_offset, 512u);
  EXPECT_EQ(ds.num_latent_scales, 4);
  EXPECT_EQ(ds.num_rope_scales, 0);
  EXPECT_EQ(ds.scale_bytes, 4);
  EXPECT_EQ(ds.rope_offset, 528u);
  EXPECT_EQ(ds.block_values, 128);

  const KvRowLayout fp4 = KvRowLayoutFor(KvFormat::kFP4E2M1, 512, 64);
  EXPECT_EQ(fp4.rope_offset, 256u);
  EXPECT_EQ(fp4.scales_offset, 288u);
  EXPECT_EQ(fp4.num_latent_scales, 32);
  EXPECT_EQ(fp4.num_rope_scales, 4);

  const KvRowLayout mx = KvRowLayoutFor(KvFormat::kMXFP4, 512, 64);
  EXPECT_EQ(mx.scales_offset, 288u);
  EXPECT_EQ(mx.num_latent_scales + mx.num_rope_scales, 18);

  const KvRowLayout fp8 = KvRowLayoutFor(KvFormat::kFP8E4M3, 512, 64);
  EXPECT_EQ(fp8.rope_offset, 512u);
  EXPECT_EQ(fp8.scales_offset, fp8.row_bytes);
  EXPECT_EQ(fp8.scale_bytes, 0);
}

TEST(KvFormatDims, ValidationNamesTheFormatAndTheDims) {
  for (KvFormat f : kAllFormats) {
    for (const Dims& d : kDims) EXPECT_TRUE(ValidateKvFormatDims(f, d.latent, d.rope).ok());
    EXPECT_FALSE(ValidateKvFormatDims(f, 0, 64).ok());
    EXPECT_FALSE(ValidateKvFormatDims(f, 512, -1).ok());
    EXPECT_FALSE(ValidateKvFormatDims(f, 65536, 64).ok());
  }
  const Status odd = ValidateKvFormatDims(KvFormat::kMXFP4, 63, 16);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.message().find("mxfp4"), std::string::npos) << odd.message();
  EXPECT_NE(odd.message().find("63"), std::string::npos) << odd.message();
  EXPECT_FALSE(ValidateKvFormatDims(KvFormat::kNVFP4, 64, 7).ok());
  EXPECT_TRUE(ValidateKvFormatDims(KvFormat::kFP8E4M3, 63, 7).ok());
  EXPECT_TRUE(ValidateKvFormatDims(KvFormat::kFP8DsMla, 63, 7).ok());
}

TEST(KvFormatTensorScale, CalibratedScalesMapAmaxToTheFormatMax) {
  EXPECT_EQ(KvTensorScaleFor(KvFormat::kFP8E4M3, 448.0f), 1.0f);
  EXPECT_EQ(KvTensorScaleFor(KvFormat::kFP8E4M3, 896.0f), 2.0f);
  EXPECT_EQ(KvTensorScaleFor(KvFormat::kFP8E5M2, 57344.0f), 1.0f);
  EXPECT_EQ(KvTensorScaleFor(KvFormat::kNVFP4, 2688.0f), 1.0f);
  EXPECT_EQ(KvTensorScaleFor(KvFormat::kNVFP4, 26.88f), 26.88f / 2688.0f);
  for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP8DsMla, KvFormat::kFP4E2M1, KvFormat::kMXFP4}) {
    EXPECT_EQ(KvTensorScaleFor(f, 123.0f), 1.0f) << KvFormatName(f);
    EXPECT_FALSE(KvFormatUsesTensorScale(f));
  }
  for (float amax : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                     std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_EQ(KvTensorScaleFor(KvFormat::kFP8E4M3, amax), 1.0f) << amax;
  }
}

// ---- An independent decoder, written from the documented layout ------------------------

uint16_t U16At(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float F32At(const std::byte* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

int BlockOf(KvFormat f) {
  switch (f) {
    case KvFormat::kFP8DsMla: return 128;
    case KvFormat::kFP4E2M1: return 16;
    case KvFormat::kMXFP4: return 32;
    case KvFormat::kNVFP4: return 16;
    default: return 0;
  }
}

// The scale that multiplies element i: the tensor scale for plain fp8, the block scale
// (times the tensor scale for nvfp4) for block formats, 1 otherwise.
float ScaleOf(KvFormat f, const std::byte* row, int latent, int rope, float tensor_scale, int i) {
  const int block = BlockOf(f);
  if (f == KvFormat::kFP8E4M3 || f == KvFormat::kFP8E5M2) return tensor_scale;
  if (f == KvFormat::kFP8DsMla) return i < latent ? F32At(row + latent + 4 * (i / block)) : 1.0f;
  if (!IsFp4(f)) return 1.0f;
  const int latent_blocks = (latent + block - 1) / block;
  const int scale_index = i < latent ? i / block : latent_blocks + (i - latent) / block;
  const auto byte = uint8_t(row[(latent + rope) / 2 + scale_index]);
  if (f == KvFormat::kNVFP4) return UE4M3ToF32(byte) * tensor_scale;
  return E8M0ToF32(byte);
}

float ReferenceValue(KvFormat f, const std::byte* row, int latent, int rope, float tensor_scale,
                     int i) {
  const float scale = ScaleOf(f, row, latent, rope, tensor_scale, i);
  const auto byte_at = [&](size_t offset) { return uint8_t(row[offset]); };
  switch (f) {
    case KvFormat::kF32: return F32At(row + 4 * i);
    case KvFormat::kBF16: return Bf16ToF32(U16At(row + 2 * i));
    case KvFormat::kFP16: return F16ToF32(U16At(row + 2 * i));
    case KvFormat::kFP8E4M3: return E4M3ToF32(byte_at(size_t(i))) * scale;
    case KvFormat::kFP8E5M2: return E5M2ToF32(byte_at(size_t(i))) * scale;
    case KvFormat::kFP8DsMla: {
      if (i < latent) return E4M3ToF32(byte_at(size_t(i))) * scale;
      const int num_scales = (latent + 127) / 128;
      return Bf16ToF32(U16At(row + latent + 4 * num_scales + 2 * (i - latent)));
    }
    case KvFormat::kFP4E2M1:
    case KvFormat::kMXFP4:
    case KvFormat::kNVFP4: {
      const uint8_t packed = byte_at(size_t(i / 2));
      const uint8_t code = (i % 2 == 0) ? (packed & 0xf) : (packed >> 4);
      return E2M1ToF32(code) * scale;
    }
  }
  return 0.0f;
}

// ---- Rows ---------------------------------------------------------------------------------

// [num_rows, latent + rope]: a normalised-looking latent, a wider rope key, and ~3% outliers
// 10-60x larger, as activations have.
std::vector<float> RandomRows(int num_rows, const Dims& d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const int row_dim = d.latent + d.rope;
  std::vector<float> rows(size_t(num_rows) * size_t(row_dim));
  for (int r = 0; r < num_rows; ++r) {
    for (int i = 0; i < row_dim; ++i) {
      float v = normal(rng) * (i < d.latent ? 1.0f : 4.0f);
      if (uniform(rng) < 0.03f) v *= 10.0f + 50.0f * uniform(rng);
      rows[size_t(r) * row_dim + i] = v;
    }
  }
  return rows;
}

float AbsMax(const std::vector<float>& values) {
  float amax = 0.0f;
  for (float v : values) amax = std::max(amax, std::fabs(v));
  return amax;
}

// The tensor scale a calibrated engine would use for these rows.
float TensorScaleFor(KvFormat f, const std::vector<float>& rows) {
  return KvTensorScaleFor(f, AbsMax(rows));
}

// Quantizes each row into a buffer with `stride` bytes per row.
std::vector<std::byte> QuantizeRows(KvFormat f, const std::vector<float>& rows, const Dims& d,
                                    float tensor_scale, size_t stride) {
  const int row_dim = d.latent + d.rope;
  const int num_rows = int(rows.size() / size_t(row_dim));
  std::vector<std::byte> bytes(stride * size_t(num_rows), std::byte{0xAB});
  for (int r = 0; r < num_rows; ++r) {
    QuantizeKvRow(f, rows.data() + size_t(r) * row_dim, d.latent, d.rope, tensor_scale,
                  bytes.data() + size_t(r) * stride);
  }
  return bytes;
}

// The finite absolute max of the scale block holding element i (the whole row part for
// formats without blocks).
float BlockAmax(KvFormat f, const float* row, const Dims& d, int i) {
  const int block = BlockOf(f);
  int begin = i < d.latent ? 0 : d.latent, end = i < d.latent ? d.latent : d.latent + d.rope;
  if (block > 0) {
    begin += (i - begin) / block * block;
    end = std::min(end, begin + block);
  }
  float amax = 0.0f;
  for (int j = begin; j < end; ++j) {
    if (std::isfinite(row[j])) amax = std::max(amax, std::fabs(row[j]));
  }
  return amax;
}

// The largest error format f may make on value v, given the scale that multiplies its code:
// half a code spacing at v, plus the saturation a block rule allows. See kv_format.h.
double ErrorBound(KvFormat f, float v, float scale, bool is_rope) {
  const double a = std::fabs(double(v)), s = scale;
  const double slack = 1e-6 * (a + s);  // fp32 products and quotients around the codes
  switch (f) {
    case KvFormat::kF32: return 0.0;
    case KvFormat::kBF16: return std::ldexp(a, -8) + slack;
    case KvFormat::kFP16: return std::ldexp(a, -11) + std::ldexp(1.0, -25) + slack;
    case KvFormat::kFP8E4M3: return std::ldexp(a, -4) + std::ldexp(s, -10) + slack;
    case KvFormat::kFP8E5M2: return std::ldexp(a, -3) + std::ldexp(s, -17) + slack;
    case KvFormat::kFP8DsMla:
      if (is_rope) return std::ldexp(a, -8) + slack;
      return std::ldexp(a, -4) + std::ldexp(s, -10) + slack;
    case KvFormat::kFP4E2M1:
    case KvFormat::kMXFP4:
    case KvFormat::kNVFP4:
      // Half the E2M1 spacing at |v| / s (0.25 below 2, 0.5 below 4, 1 up to 6), in units
      // of s, or the saturation |v| - 6 s when the block rule lets amax pass 6 s.
      return std::max({0.25 * s, a / 4, a - 6 * s}) + slack;
  }
  return 0.0;
}

TEST(KvFormatCodec, RoundTripStaysWithinTheFormatBound) {
  for (KvFormat f : kAllFormats) {
    for (const Dims& d : kDims) {
      SCOPED_TRACE(std::string(KvFormatName(f)) + " " + std::to_string(d.latent) + "+" +
                   std::to_string(d.rope));
      const int num_rows = 32, row_dim = d.latent + d.rope;
      const std::vector<float> rows = RandomRows(num_rows, d, 7);
      const float tensor_scale = TensorScaleFor(f, rows);
      const size_t stride = KvRowBytes(f, d.latent, d.rope);
      const std::vector<std::byte> bytes = QuantizeRows(f, rows, d, tensor_scale, stride);
      std::vector<float> out(rows.size());
      DequantizeKvRows(f, bytes.data(), num_rows, stride, d.latent, d.rope, tensor_scale,
                       out.data());
      for (int r = 0; r < num_rows; ++r) {
        const float* row = rows.data() + size_t(r) * row_dim;
        const std::byte* row_bytes = bytes.data() + size_t(r) * stride;
        for (int i = 0; i < row_dim; ++i) {
          const float v = row[i], got = out[size_t(r) * row_dim + i];
          const float scale = ScaleOf(f, row_bytes, d.latent, d.rope, tensor_scale, i);
          const double error = std::fabs(double(got) - double(v));
          ASSERT_LE(error, ErrorBound(f, v, scale, i >= d.latent))
              << "row " << r << " index " << i << " value " << v << " got " << got
              << " scale " << scale;
          // The same, relative to the block's absolute max.
          const double block_amax = BlockAmax(f, row, d, i);
          if (f == KvFormat::kFP4E2M1) {
            ASSERT_LE(error, block_amax / 3);
          }
          if (f == KvFormat::kMXFP4) {
            ASSERT_LE(error, block_amax / 4);
          }
          if (f == KvFormat::kNVFP4 && scale >= std::ldexp(1.0f, -6) * tensor_scale) {
            ASSERT_LE(error, 0.18 * block_amax);  // block scale a normal UE4M3
          }
        }
      }
    }
  }
}

TEST(KvFormatCodec, FastPathMatchesTheLayoutReferenceWithPaddedStride) {
  for (KvFormat f : kAllFormats) {
    for (const Dims& d : kDims) {
      SCOPED_TRACE(std::string(KvFormatName(f)) + " " + std::to_string(d.latent) + "+" +
                   std::to_string(d.rope));
      const int row_dim = d.latent + d.rope;
      for (int num_rows : {1, 16, 64}) {
        const std::vector<float> rows = RandomRows(num_rows, d, uint32_t(100 + num_rows));
        const float tensor_scale = KvFormatUsesTensorScale(f) ? 0.37f : 1.0f;
        const size_t stride = KvRowBytes(f, d.latent, d.rope) + 13;  // unaligned rows
        const std::vector<std::byte> bytes = QuantizeRows(f, rows, d, tensor_scale, stride);
        std::vector<float> out(rows.size());
        DequantizeKvRows(f, bytes.data(), num_rows, stride, d.latent, d.rope, tensor_scale,
                         out.data());
        for (int r = 0; r < num_rows; ++r) {
          for (int i = 0; i < row_dim; ++i) {
            const float expected = ReferenceValue(f, bytes.data() + size_t(r) * stride, d.latent,
                                                  d.rope, tensor_scale, i);
            ASSERT_EQ(out[size_t(r) * row_dim + i], expected) << "row " << r << " index " << i;
          }
          // Padding after the row is never written.
          const std::byte* pad = bytes.data() + size_t(r) * stride + stride - 13;
          for (int k = 0; k < 13; ++k) ASSERT_EQ(pad[k], std::byte{0xAB});
        }
      }
    }
  }
}

TEST(KvFormatCodec, ZeroRowsDecodeToZero) {
  for (KvFormat f : kAllFormats) {
    for (const Dims& d : kDims) {
      const std::vector<float> rows(size_t(4) * size_t(d.latent + d.rope), 0.0f);
      const size_t stride = KvRowBytes(f, d.latent, d.rope);
      const std::vector<std::byte> bytes = QuantizeRows(f, rows, d, 1.0f, stride);
      std::vector<float> out(rows.size(), 1.0f);
      DequantizeKvRows(f, bytes.data(), 4, stride, d.latent, d.rope, 1.0f, out.data());
      for (float v : out) ASSERT_EQ(v, 0.0f) << KvFormatName(f);
    }
  }
}

TEST(KvFormatCodec, BF16AndF32AreExactToTheirRounding) {
  const Dims d{128, 32};
  const std::vector<float> rows = RandomRows(8, d, 11);
  for (KvFormat f : {KvFormat::kF32, KvFormat::kBF16, KvFormat::kFP16}) {
    const size_t stride = KvRowBytes(f, d.latent, d.rope);
    const std::vector<std::byte> bytes = QuantizeRows(f, rows, d, 1.0f, stride);
    std::vector<float> out(rows.size());
    DequantizeKvRows(f, bytes.data(), 8, stride, d.latent, d.rope, 1.0f, out.data());
    for (size_t i = 0; i < rows.size(); ++i) {
      const float expected = f == KvFormat::kF32    ? rows[i]
                             : f == KvFormat::kBF16 ? Bf16ToF32(F32ToBf16(rows[i]))
                                                    : F16ToF32(F32ToF16(rows[i]));
      ASSERT_EQ(out[i], expected) << KvFormatName(f) << " " << i;
    }
  }
}

TEST(KvFormatCodec, FP16DecodesEveryCodeLikeTheScalarConversion) {
  // One "row" of 65536 values holding every fp16 code once.
  std::vector<std::byte> bytes(2 * 65536);
  for (uint32_t code = 0; code < 65536; ++code) {
    const auto half = uint16_t(code);
    std::memcpy(bytes.data() + 2 * code, &half, 2);
  }
  std::vector<float> out(65536);
  DequantizeKvRows(KvFormat::kFP16, bytes.data(), 1, bytes.size(), 65536 - 64, 64, 1.0f,
                   out.data());
  for (uint32_t code = 0; code < 65536; ++code) {
    const float expected = F16ToF32(uint16_t(code));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(out[code])) << code;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(out[code]), std::bit_cast<uint32_t>(expected)) << code;
    }
  }
}

// ---- Scale rules ------------------------------------------------------------------------

TEST(KvFormatDsMla, ScalesArePowersOfTwoAndAmaxNeverSaturates) {
  const Dims d{512, 64};
  const std::vector<float> rows = RandomRows(64, d, 21);
  const size_t stride = KvRowBytes(KvFormat::kFP8DsMla, d.latent, d.rope);
  const std::vector<std::byte> bytes = QuantizeRows(KvFormat::kFP8DsMla, rows, d, 1.0f, stride);
  std::vector<float> out(rows.size());
  DequantizeKvRows(KvFormat::kFP8DsMla, bytes.data(), 64, stride, d.latent, d.rope, 1.0f,
                   out.data());
  for (int r = 0; r < 64; ++r) {
    const float* row = rows.data() + size_t(r) * 576;
    const std::byte* row_bytes = bytes.data() + size_t(r) * stride;
    for (int block = 0; block < 4; ++block) {
      const float scale = F32At(row_bytes + 512 + 4 * block);
      int exponent = 0;
      ASSERT_EQ(std::frexp(scale, &exponent), 0.5f) << "not a power of two: " << scale;
      const float amax = BlockAmax(KvFormat::kFP8DsMla, row, d, block * 128);
      // Rounded up, and the smallest such power of two.
      ASSERT_GE(double(scale) * 448.0, double(amax));
      ASSERT_LT(double(scale) * 224.0, double(amax));
      for (int i = block * 128; i < block * 128 + 128; ++i) {
        const auto code = uint8_t(row_bytes[i]);
        ASSERT_LE(std::fabs(row[i]), 448.0f * scale) << "would saturate: " << i;
        // The max code only for values that round to it, never as a clamp.
        if ((code & 0x7f) == 0x7e) {
          ASSERT_GE(std::fabs(row[i]), 432.0f * scale) << i;
        }
        if (std::fabs(row[i]) == amax) {
          ASSERT_LE(std::fabs(std::fabs(double(out[size_t(r) * 576 + i])) - amax), amax / 16.0)
              << "row " << r << " index " << i << " value " << row[i];
        }
      }
    }
    for (int j = 0; j < 64; ++j) {
      const float v = row[512 + j];
      ASSERT_EQ(U16At(row_bytes + 528 + 2 * j), F32ToBf16(v)) << "rope stored as bf16";
      ASSERT_EQ(out[size_t(r) * 576 + 512 + j], Bf16ToF32(F32ToBf16(v))) << "rope exact";
    }
  }
}

TEST(KvFormatDsMla, HandCheckedBlockScale) {
  std::vector<float> row(128 + 8, 0.0f);
  row[0] = 448.0f;  // amax / 448 = 1: scale 1, code 0x7E
  row[1] = -1.0f;
  row[128] = 3.0f;
  std::vector<std::byte> bytes(KvRowBytes(KvFormat::kFP8DsMla, 128, 8));
  QuantizeKvRow(KvFormat::kFP8DsMla, row.data(), 128, 8, 1.0f, bytes.data());
  EXPECT_EQ(F32At(bytes.data() + 128), 1.0f);
  EXPECT_EQ(uint8_t(bytes[0]), 0x7E);
  EXPECT_EQ(uint8_t(bytes[1]), 0xB8);
  row[0] = 449.0f;  // just past: scale 2
  QuantizeKvRow(KvFormat::kFP8DsMla, row.data(), 128, 8, 1.0f, bytes.data());
  EXPECT_EQ(F32At(bytes.data() + 128), 2.0f);
  row[0] = 0.1f;  // 0.1 / 448 = 2^-12.1: scale 2^-12
  row[1] = 0.0f;
  QuantizeKvRow(KvFormat::kFP8DsMla, row.data(), 128, 8, 1.0f, bytes.data());
  EXPECT_EQ(F32At(bytes.data() + 128), std::ldexp(1.0f, -12));
}

TEST(KvFormatFp4, ScaleBytesFollowEachRule) {
  const Dims d{512, 64};
  const std::vector<float> rows = RandomRows(16, d, 31);
  for (KvFormat f : {KvFormat::kFP4E2M1, KvFormat::kMXFP4, KvFormat::kNVFP4}) {
    const float tensor_scale = TensorScaleFor(f, rows);
    const size_t stride = KvRowBytes(f, d.latent, d.rope);
    const std::vector<std::byte> bytes = QuantizeRows(f, rows, d, tensor_scale, stride);
    const KvRowLayout layout = KvRowLayoutFor(f, d.latent, d.rope);
    uint8_t largest_nvfp4_scale = 0;
    for (int r = 0; r < 16; ++r) {
      const float* row = rows.data() + size_t(r) * 576;
      for (int b = 0; b < layout.num_latent_scales + layout.num_rope_scales; ++b) {
        const int first = b < layout.num_latent_scales
                              ? b * layout.block_values
                              : d.latent + (b - layout.num_latent_scales) * layout.block_values;
        const double amax = BlockAmax(f, row, d, first);
        const auto code = uint8_t(bytes[size_t(r) * stride + layout.scales_offset + size_t(b)]);
        if (f == KvFormat::kFP4E2M1) {
          ASSERT_EQ(code, int(std::ceil(std::log2(amax / 6.0))) + 127) << amax;
        } else if (f == KvFormat::kMXFP4) {
          ASSERT_EQ(code, int(std::floor(std::log2(amax))) - 2 + 127) << amax;
        } else {
          ASSERT_EQ(code, F32ToUE4M3(float(amax) / 6.0f / tensor_scale)) << amax;
          largest_nvfp4_scale = std::max(largest_nvfp4_scale, code);
        }
      }
    }
    if (f == KvFormat::kNVFP4) {
      EXPECT_EQ(largest_nvfp4_scale, 0x7E) << "calibrated: 448";
    }
  }
}

TEST(KvFormatFp4, HandCheckedScaleBytes) {
  std::vector<float> row(32 + 32, 0.0f);
  std::vector<std::byte> bytes(64);
  const auto scale_byte = [&](KvFormat f, int index) {
    return uint8_t(bytes[KvRowLayoutFor(f, 32, 32).scales_offset + size_t(index)]);
  };
  // fp4_e2m1: ceil(log2(amax / 6)) + 127.
  row[0] = 6.0f;
  row[16] = 6.5f;
  row[32] = 3.0f;
  row[48] = 12.0f;
  QuantizeKvRow(KvFormat::kFP4E2M1, row.data(), 32, 32, 1.0f, bytes.data());
  EXPECT_EQ(scale_byte(KvFormat::kFP4E2M1, 0), 127);
  EXPECT_EQ(scale_byte(KvFormat::kFP4E2M1, 1), 128);
  EXPECT_EQ(scale_byte(KvFormat::kFP4E2M1, 2), 126);
  EXPECT_EQ(scale_byte(KvFormat::kFP4E2M1, 3), 128);
  EXPECT_EQ(uint8_t(bytes[0]) & 0xf, 0x7);  // 6 / 1 = 6
  // mxfp4: floor(log2(amax)) - 2 + 127; 7.9 / 1 saturates to 6.
  row[0] = 7.9f;
  row[32] = 8.0f;
  QuantizeKvRow(KvFormat::kMXFP4, row.data(), 32, 32, 1.0f, bytes.data());
  EXPECT_EQ(scale_byte(KvFormat::kMXFP4, 0), 127);
  EXPECT_EQ(scale_byte(KvFormat::kMXFP4, 1), 128);
  EXPECT_EQ(uint8_t(bytes[0]) & 0xf, 0x7);
  std::vector<float> out(64);
  DequantizeKvRows(KvFormat::kMXFP4, bytes.data(), 1, 64, 32, 32, 1.0f, out.data());
  EXPECT_EQ(out[0], 6.0f);
  EXPECT_EQ(out[32], 8.0f);  // 8 / 2 = 4, exact
  // nvfp4 with tensor scale 0.5: block scale (6 / 6) / 0.5 = 2 -> UE4M3 0x40.
  row[0] = 6.0f;
  QuantizeKvRow(KvFormat::kNVFP4, row.data(), 32, 32, 0.5f, bytes.data());
  EXPECT_EQ(scale_byte(KvFormat::kNVFP4, 0), 0x40);
  DequantizeKvRows(KvFormat::kNVFP4, bytes.data(), 1, 64, 32, 32, 0.5f, out.data());
  EXPECT_EQ(out[0], 6.0f);
}

// ---- NaN and inf ------------------------------------------------------------------------

TEST(KvFormatCodec, NanReadsBackAsNanAndInfSaturates) {
  const Dims d{64, 32};
  const int row_dim = d.latent + d.rope;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> row = RandomRows(1, d, 41);
  const int nan_latent = 3, nan_rope = d.latent + 1, inf_latent = 40, neg_inf_latent = 50;
  row[nan_latent] = std::numeric_limits<float>::quiet_NaN();
  row[nan_rope] = std::numeric_limits<float>::quiet_NaN();
  row[inf_latent] = inf;
  row[neg_inf_latent] = -inf;
  for (KvFormat f : kAllFormats) {
    SCOPED_TRACE(KvFormatName(f));
    const std::vector<std::byte> bytes =
        QuantizeRows(f, row, d, 1.0f, KvRowBytes(f, d.latent, d.rope));
    std::vector<float> out(static_cast<size_t>(row_dim));
    DequantizeKvRows(f, bytes.data(), 1, bytes.size(), d.latent, d.rope, 1.0f, out.data());
    const int block = BlockOf(f);
    const auto same_block = [&](int i, int j) {
      if (!IsFp4(f)) return i == j;
      if ((i < d.latent) != (j < d.latent)) return false;
      const int base = i < d.latent ? 0 : d.latent;
      return (i - base) / block == (j - base) / block;
    };
    for (int i = 0; i < row_dim; ++i) {
      const bool expect_nan = same_block(i, nan_latent) || same_block(i, nan_rope);
      ASSERT_EQ(std::isnan(out[i]), expect_nan) << "index " << i;
    }
    if (f == KvFormat::kF32) continue;  // stores inf as it is
    for (int i : {inf_latent, neg_inf_latent}) {
      if (std::isnan(out[i])) continue;  // inside a NaN block
      const float scale = ScaleOf(f, bytes.data(), d.latent, d.rope, 1.0f, i);
      float expected_max = 0.0f;
      switch (f) {
        case KvFormat::kBF16: expected_max = std::bit_cast<float>(0x7f7f0000u); break;
        case KvFormat::kFP16: expected_max = 65504.0f; break;
        case KvFormat::kFP8E4M3:
        case KvFormat::kFP8DsMla: expected_max = 448.0f * scale; break;
        case KvFormat::kFP8E5M2: expected_max = 57344.0f * scale; break;
        default: expected_max = 6.0f * scale; break;
      }
      ASSERT_EQ(out[i], row[i] > 0 ? expected_max : -expected_max) << "index " << i;
      // The block scale came from the finite values, not from inf.
      if (IsFp4(f) || f == KvFormat::kFP8DsMla) {
        ASSERT_LT(scale, 1e3f);
      }
    }
  }
}

}  // namespace
}  // namespace mlaserve
