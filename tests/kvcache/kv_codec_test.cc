// kv_codec: every SIMD KV row decoder this CPU runs gives the same bits as the scalar reference
// (PortableKvCodec), for every format, on quantized rows with edge values (zeros, -0, fp32 and
// target subnormals, NaN, +-inf, huge values), on raw bytes holding every code, with ragged
// dims (tails shorter than a vector), padded strides and tensor scales that make subnormal and
// huge products.
#include "kvcache/kv_codec.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kvcache/kv_format.h"

namespace mlaserve {
namespace {

bool IsFp4(KvFormat f) { return f == KvFormat::kFP4E2M1 || f == KvFormat::kMXFP4 || f == KvFormat::kNVFP4; }

// The SIMD codecs this CPU runs (none on a CPU without AVX2: the tests then check nothing but
// the reference against itself).
std::vector<const KvCodec*> SimdCodecs() {
  std::vector<const KvCodec*> out;
  for (KernelIsa isa : {KernelIsa::kAvx2, KernelIsa::kAvx512}) {
    if (const KvCodec* codec = KvCodecFor(isa)) out.push_back(codec);
  }
  return out;
}

struct Dims {
  int latent;
  int rope;
};
// DeepSeek-V3; latents that are not multiples of 8 or 16 lanes (40, 24, 200) or of the fp4
// blocks; a rope shorter than a vector; no rope.
constexpr Dims kDims[] = {{512, 64}, {40, 24}, {24, 64}, {200, 10}, {130, 6}, {2, 2}, {64, 0}};

std::string Trace(KvFormat f, const Dims& d, const KvCodec& codec) {
  return std::string(KvFormatName(f)) + " " + std::to_string(d.latent) + "+" + std::to_string(d.rope) + " " +
         codec.name;
}

// Values a KV row must survive: each format's limits, subnormals of fp32 and of the targets,
// specials.
const float kEdgeValues[] = {0.0f,
                             -0.0f,
                             FLT_TRUE_MIN,
                             -FLT_MIN / 3,
                             1e-7f,           // fp16 subnormal
                             -0.001953125f,   // 2^-9, the smallest E4M3 subnormal
                             0.0009765625f,   // 2^-10, half of it: a tie to zero
                             448.0f,
                             -464.0f,         // past E4M3's max
                             57344.0f,
                             65504.0f,
                             -70000.0f,       // past fp16's max
                             1e38f,
                             -FLT_MAX,
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN(),
                             -std::numeric_limits<float>::quiet_NaN()};

// num_rows rows of normal values at a random magnitude per row, about one in 12 replaced by an
// edge value.
std::vector<float> EdgeRows(int num_rows, int row_dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30), pick(0, 11);
  std::uniform_int_distribution<size_t> edge(0, std::size(kEdgeValues) - 1);
  std::vector<float> rows(size_t(num_rows) * size_t(row_dim));
  for (int r = 0; r < num_rows; ++r) {
    const float magnitude = std::ldexp(1.0f, exponent(rng));
    for (int i = 0; i < row_dim; ++i) {
      float& v = rows[size_t(r) * size_t(row_dim) + size_t(i)];
      v = pick(rng) == 0 ? kEdgeValues[edge(rng)] : magnitude * normal(rng);
    }
  }
  return rows;
}

std::vector<float> Decode(const KvCodec& codec, KvFormat f, const std::vector<std::byte>& bytes, int num_rows,
                          size_t stride, const Dims& d, float tensor_scale) {
  std::vector<float> out(size_t(num_rows) * size_t(d.latent + d.rope), 12345.0f);
  codec.dequantize_rows(f, bytes.data(), num_rows, stride, KvRowLayoutFor(f, d.latent, d.rope), d.latent, d.rope,
                        tensor_scale, out.data());
  return out;
}

// Bitwise, so NaN payloads and signs and -0 count.
void ExpectSameBits(const std::vector<float>& expected, const std::vector<float>& got) {
  ASSERT_EQ(expected.size(), got.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(expected[i]))
        << "value " << i << ": expected " << expected[i] << ", got " << got[i];
  }
}

TEST(KvCodec, DefaultFollowsTheKernelTable) {
  EXPECT_EQ(DefaultKvCodec().isa, DefaultKernels().isa);
  EXPECT_EQ(KvCodecFor(KernelIsa::kPortable), &PortableKvCodec());
  if (CpuSupports(KernelIsa::kAvx512)) {
    EXPECT_EQ(KvCodecFor(KernelIsa::kAvx512), Avx512KvCodec());
  }
}

TEST(KvCodec, SimdMatchesScalarBitwiseOnQuantizedEdgeRows) {
  const float tensor_scales[] = {1.0f, 0.37f, 3e-36f, 2.5e30f};
  if (SimdCodecs().empty()) GTEST_SKIP() << "this CPU runs no SIMD codec (no AVX2): nothing to compare with the scalar one";
  for (const KvCodec* codec : SimdCodecs()) {
    for (KvFormat f : kAllKvFormats) {
      for (const Dims& d : kDims) {
        if (IsFp4(f) && (d.latent % 2 != 0 || d.rope % 2 != 0)) continue;
        SCOPED_TRACE(Trace(f, d, *codec));
        const int row_dim = d.latent + d.rope;
        for (float tensor_scale : tensor_scales) {
          if (!KvFormatUsesTensorScale(f) && tensor_scale != 1.0f) continue;
          for (int num_rows : {1, 16}) {
            const std::vector<float> rows = EdgeRows(num_rows, row_dim, uint32_t(row_dim * 31 + num_rows));
            const size_t stride = KvRowBytes(f, d.latent, d.rope) + 5;  // unaligned rows
            std::vector<std::byte> bytes(stride * size_t(num_rows));
            for (int r = 0; r < num_rows; ++r) {
              QuantizeKvRow(f, rows.data() + size_t(r) * size_t(row_dim), d.latent, d.rope, tensor_scale,
                            bytes.data() + size_t(r) * stride);
            }
            ExpectSameBits(Decode(PortableKvCodec(), f, bytes, num_rows, stride, d, tensor_scale),
                           Decode(*codec, f, bytes, num_rows, stride, d, tensor_scale));
          }
        }
      }
    }
  }
}

// Random bytes reach every code, NaN and inf codes, every scale byte (fp4: NaN scales, E8M0's
// subnormal 2^-127, UE4M3's bit 7 that the decoder ignores). fp8_ds_mla's fp32 scales are
// replaced by random finite ones (the encoder writes powers of two; a NaN scale times a NaN
// code has no single right answer).
TEST(KvCodec, SimdMatchesScalarBitwiseOnRandomBytes) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255), exponent(-140, 120);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (SimdCodecs().empty()) GTEST_SKIP() << "this CPU runs no SIMD codec (no AVX2): nothing to compare with the scalar one";
  for (const KvCodec* codec : SimdCodecs()) {
    for (KvFormat f : kAllKvFormats) {
      for (const Dims& d : kDims) {
        if (IsFp4(f) && (d.latent % 2 != 0 || d.rope % 2 != 0)) continue;
        SCOPED_TRACE(Trace(f, d, *codec));
        const KvRowLayout layout = KvRowLayoutFor(f, d.latent, d.rope);
        const int num_rows = 16;
        std::vector<std::byte> bytes(layout.row_bytes * num_rows);
        for (std::byte& b : bytes) b = std::byte(byte(rng));
        for (int r = 0; r < num_rows; ++r) {
          std::byte* row = bytes.data() + size_t(r) * layout.row_bytes;
          if (f == KvFormat::kF32) {
            for (int i = 0; i < d.latent + d.rope; ++i) {
              const float v = std::ldexp(normal(rng), exponent(rng));
              std::memcpy(row + 4 * i, &v, 4);
            }
          }
          if (f == KvFormat::kFP8DsMla) {
            for (int s = 0; s < layout.num_latent_scales; ++s) {
              const float scale = std::ldexp(normal(rng), exponent(rng));
              std::memcpy(row + layout.scales_offset + 4 * size_t(s), &scale, 4);
            }
          }
        }
        const float tensor_scale = KvFormatUsesTensorScale(f) ? 0.013f : 1.0f;
        ExpectSameBits(Decode(PortableKvCodec(), f, bytes, num_rows, layout.row_bytes, d, tensor_scale),
                       Decode(*codec, f, bytes, num_rows, layout.row_bytes, d, tensor_scale));
      }
    }
  }
}

// Every code of the 8- and 16-bit formats, at every lane position of a vector.
TEST(KvCodec, SimdMatchesScalarBitwiseOnEveryCode) {
  if (SimdCodecs().empty()) GTEST_SKIP() << "this CPU runs no SIMD codec (no AVX2): nothing to compare with the scalar one";
  for (const KvCodec* codec : SimdCodecs()) {
    SCOPED_TRACE(codec->name);
    {
      const Dims d{65536 - 64, 64};
      std::vector<std::byte> bytes(2 * 65536);
      for (uint32_t code = 0; code < 65536; ++code) {
        const auto half = uint16_t(code);
        std::memcpy(bytes.data() + 2 * code, &half, 2);
      }
      for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP16}) {
        SCOPED_TRACE(KvFormatName(f));
        ExpectSameBits(Decode(PortableKvCodec(), f, bytes, 1, bytes.size(), d, 1.0f),
                       Decode(*codec, f, bytes, 1, bytes.size(), d, 1.0f));
      }
    }
    // 256 codes shifted by 0..16 so each code lands in every lane.
    const Dims d{256 * 17 - 64, 64};
    std::vector<std::byte> bytes(256 * 17);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte((i % 256) + i / 256);
    for (KvFormat f : {KvFormat::kFP8E4M3, KvFormat::kFP8E5M2}) {
      SCOPED_TRACE(KvFormatName(f));
      ExpectSameBits(Decode(PortableKvCodec(), f, bytes, 1, bytes.size(), d, 1.0f),
                     Decode(*codec, f, bytes, 1, bytes.size(), d, 1.0f));
      ExpectSameBits(Decode(PortableKvCodec(), f, bytes, 1, bytes.size(), d, 1e-40f),
                     Decode(*codec, f, bytes, 1, bytes.size(), d, 1e-40f));
    }
  }
}

// DequantizeKvRows (the entry attention calls) goes through the default codec and still gives
// the scalar reference's bits.
TEST(KvCodec, DequantizeKvRowsUsesTheDefaultCodec) {
  const Dims d{512, 64};
  const int row_dim = d.latent + d.rope, num_rows = 16;
  for (KvFormat f : kAllKvFormats) {
    SCOPED_TRACE(KvFormatName(f));
    const std::vector<float> rows = EdgeRows(num_rows, row_dim, 77);
    const size_t stride = KvRowBytes(f, d.latent, d.rope);
    std::vector<std::byte> bytes(stride * num_rows);
    for (int r = 0; r < num_rows; ++r) {
      QuantizeKvRow(f, rows.data() + size_t(r) * size_t(row_dim), d.latent, d.rope, 0.5f,
                    bytes.data() + size_t(r) * stride);
    }
    std::vector<float> out(rows.size());
    DequantizeKvRows(f, bytes.data(), num_rows, stride, d.latent, d.rope, 0.5f, out.data());
    ExpectSameBits(Decode(PortableKvCodec(), f, bytes, num_rows, stride, d, 0.5f), out);
  }
}

}  // namespace
}  // namespace mlaserve
