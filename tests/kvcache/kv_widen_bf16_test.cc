// Rows widened to bf16 (kv_widen_bf16.h): the reference is the rows' dequantized values exactly
// (times the plain-fp8 tensor scale); the AVX-512 widening is the reference bit for bit, on every
// e4m3 code (NaN included), ds_mla blocks with large, small and below-range scales, and odd
// row lengths.
#include "kvcache/kv_widen_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/float16.h"
#include "kernels/kernels.h"

namespace mlaserve {
namespace {

struct Rows {
  std::vector<std::byte> bytes;
  size_t row_bytes;
};

// num_rows rows of `format` with values of magnitude `sigma`, quantized by the real encoder.
Rows Quantized(KvFormat format, int num_rows, int latent_dim, int rope_dim, float sigma, float tensor_scale,
               std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, sigma);
  Rows rows{{}, KvRowBytes(format, latent_dim, rope_dim)};
  rows.bytes.resize(rows.row_bytes * size_t(num_rows));
  std::vector<float> values(size_t(latent_dim + rope_dim));
  for (int r = 0; r < num_rows; ++r) {
    for (float& v : values) v = normal(rng);
    QuantizeKvRow(format, values.data(), latent_dim, rope_dim, tensor_scale, rows.bytes.data() + size_t(r) * rows.row_bytes);
  }
  return rows;
}

TEST(KvWidenBf16, ReferenceIsTheDequantizedValues) {
  std::mt19937 rng(1);
  for (KvFormat format : {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla}) {
    SCOPED_TRACE(KvFormatName(format));
    const int latent = 512, rope = 64, n = 5;
    const float tensor_scale = format == KvFormat::kFP8E4M3 ? 0.37f : 1.0f;
    const Rows rows = Quantized(format, n, latent, rope, 2.0f, tensor_scale, rng);
    std::vector<float> want(size_t(n) * (latent + rope));
    DequantizeKvRows(format, rows.bytes.data(), n, rows.row_bytes, latent, rope, tensor_scale, want.data());
    std::vector<uint16_t> got(want.size());
    WidenKvRowsBf16Reference(format, rows.bytes.data(), n, rows.row_bytes, latent, rope, got.data());
    const float factor = KvWidenedScale(format, tensor_scale);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(Bf16ToF32(got[i]) * factor, want[i]) << i;
  }
}

TEST(KvWidenBf16, Avx512IsTheReferenceBitForBit) {
  if (!CpuSupports(KernelIsa::kAvx512)) GTEST_SKIP() << "this CPU lacks AVX-512";
  std::mt19937 rng(2);
  // Every e4m3 code, in rows of odd length (a masked last vector).
  {
    const int latent = 200, rope = 56, row_dim = latent + rope;
    std::vector<std::byte> bytes(size_t(row_dim) * 3);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(i % 256);
    std::vector<uint16_t> want(bytes.size()), got(bytes.size());
    WidenKvRowsBf16Reference(KvFormat::kFP8E4M3, bytes.data(), 3, size_t(row_dim), latent, rope, want.data());
    avx512::WidenKvRowsBf16(KvFormat::kFP8E4M3, bytes.data(), 3, size_t(row_dim), latent, rope, got.data());
    ASSERT_EQ(got, want);
    EXPECT_TRUE(std::isnan(Bf16ToF32(want[0x7F])) && std::isnan(Bf16ToF32(want[0xFF])));
  }
  for (KvFormat format : {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla}) {
    for (float sigma : {1e-3f, 1.0f, 3e4f}) {
      SCOPED_TRACE(std::string(KvFormatName(format)) + " sigma " + std::to_string(sigma));
      const int latent = 512, rope = 64, n = 7;
      const Rows rows = Quantized(format, n, latent, rope, sigma, 1.0f, rng);
      std::vector<uint16_t> want(size_t(n) * (latent + rope)), got(want.size());
      WidenKvRowsBf16Reference(format, rows.bytes.data(), n, rows.row_bytes, latent, rope, want.data());
      avx512::WidenKvRowsBf16(format, rows.bytes.data(), n, rows.row_bytes, latent, rope, got.data());
      ASSERT_EQ(got, want);
    }
  }
  // A ds_mla block whose scale is below the range reads as signed zeros, in both.
  {
    const int latent = 256, rope = 64;
    Rows rows = Quantized(KvFormat::kFP8DsMla, 1, latent, rope, 1.0f, 1.0f, rng);
    const KvRowLayout layout = KvRowLayoutFor(KvFormat::kFP8DsMla, latent, rope);
    const float tiny = 0x1p-120f;
    std::memcpy(rows.bytes.data() + layout.scales_offset + 4, &tiny, sizeof tiny);
    std::vector<uint16_t> want(size_t(latent + rope)), got(want.size());
    WidenKvRowsBf16Reference(KvFormat::kFP8DsMla, rows.bytes.data(), 1, rows.row_bytes, latent, rope, want.data());
    avx512::WidenKvRowsBf16(KvFormat::kFP8DsMla, rows.bytes.data(), 1, rows.row_bytes, latent, rope, got.data());
    ASSERT_EQ(got, want);
    for (int i = 128; i < 256; ++i) ASSERT_EQ(want[size_t(i)] & 0x7FFF, 0) << i;
  }
}

}  // namespace
}  // namespace mlaserve
