#include "kvcache/kv_widen_bf16.h"

#include <bit>

#include "kernels/kernels.h"
#include "kvcache/fp8.h"
#include "kvcache/kv_widen_bf16_rows.h"

namespace mlaserve {
namespace {

// Each code's value (fp8.h's table) times the scale, exact in fp32, as its bf16 bits.
struct ScalarParts {
  static void E4M3(const uint8_t* codes, int count, float scale, uint16_t* out) {
    for (int i = 0; i < count; ++i) out[i] = uint16_t(std::bit_cast<uint32_t>(kE4M3ToF32[codes[i]] * scale) >> 16);
  }
};

}  // namespace

bool KvRowsWidenToBf16(KvFormat format) {
  return format == KvFormat::kBF16 || format == KvFormat::kFP8E4M3 || format == KvFormat::kFP8DsMla;
}

float KvWidenedScale(KvFormat format, float tensor_scale) {
  return format == KvFormat::kFP8E4M3 ? tensor_scale : 1.0f;
}

void WidenKvRowsBf16Reference(KvFormat format, const std::byte* src, int num_rows, size_t row_stride_bytes,
                              int latent_dim, int rope_dim, uint16_t* out) {
  kv_widen::WidenRowsWith<ScalarParts>(format, src, num_rows, row_stride_bytes, latent_dim, rope_dim, out);
}

void WidenKvRowsBf16(KvFormat format, const std::byte* src, int num_rows, size_t row_stride_bytes, int latent_dim,
                     int rope_dim, uint16_t* out) {
  static const bool simd = CpuSupports(KernelIsa::kAvx512);
  if (simd) return avx512::WidenKvRowsBf16(format, src, num_rows, row_stride_bytes, latent_dim, rope_dim, out);
  WidenKvRowsBf16Reference(format, src, num_rows, row_stride_bytes, latent_dim, rope_dim, out);
}

}  // namespace mlaserve
