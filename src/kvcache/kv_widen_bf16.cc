#include "kvcache/kv_widen_bf16.h"

#include <bit>
#include <cstring>

#include "core/check.h"
#include "core/float16.h"
#include "kernels/kernels.h"
#include "kvcache/fp8.h"

namespace mlaserve {
namespace {

// Smallest ds_mla block scale whose products stay normal in bf16 (codes reach down to 2^-9).
constexpr float kMinDsMlaScale = 0x1p-100f;

uint16_t Bf16Bits(float exact) { return uint16_t(std::bit_cast<uint32_t>(exact) >> 16); }

}  // namespace

bool KvRowsWidenToBf16(KvFormat format) {
  return format == KvFormat::kBF16 || format == KvFormat::kFP8E4M3 || format == KvFormat::kFP8DsMla;
}

float KvWidenedScale(KvFormat format, float tensor_scale) {
  return format == KvFormat::kFP8E4M3 ? tensor_scale : 1.0f;
}

void WidenKvRowsBf16Reference(KvFormat format, const std::byte* src, int num_rows, size_t row_stride_bytes,
                              int latent_dim, int rope_dim, uint16_t* out) {
  MLA_CHECK(KvRowsWidenToBf16(format));
  const KvRowLayout layout = KvRowLayoutFor(format, latent_dim, rope_dim);
  const int row_dim = latent_dim + rope_dim;
  for (int r = 0; r < num_rows; ++r) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(src + size_t(r) * row_stride_bytes);
    uint16_t* row = out + size_t(r) * size_t(row_dim);
    switch (format) {
      case KvFormat::kBF16:
        std::memcpy(row, bytes, size_t(row_dim) * 2);
        break;
      case KvFormat::kFP8E4M3:
        for (int i = 0; i < row_dim; ++i) row[i] = Bf16Bits(kE4M3ToF32[bytes[i]]);
        break;
      case KvFormat::kFP8DsMla:
        for (int block = 0; block < layout.num_latent_scales; ++block) {
          float scale;
          std::memcpy(&scale, bytes + layout.scales_offset + 4 * size_t(block), sizeof scale);
          const int start = block * layout.block_values;
          const int end = std::min(start + layout.block_values, latent_dim);
          for (int i = start; i < end; ++i) {
            row[i] = scale >= kMinDsMlaScale ? Bf16Bits(kE4M3ToF32[bytes[i]] * scale)
                                             : uint16_t(bytes[i] & 0x80u) << 8;  // signed zero
          }
        }
        std::memcpy(row + latent_dim, bytes + layout.rope_offset, size_t(rope_dim) * 2);
        break;
      default:
        MLA_CHECK(false);
    }
  }
}

void WidenKvRowsBf16(KvFormat format, const std::byte* src, int num_rows, size_t row_stride_bytes, int latent_dim,
                     int rope_dim, uint16_t* out) {
  static const bool simd = CpuSupports(KernelIsa::kAvx512);
  if (simd) return avx512::WidenKvRowsBf16(format, src, num_rows, row_stride_bytes, latent_dim, rope_dim, out);
  WidenKvRowsBf16Reference(format, src, num_rows, row_stride_bytes, latent_dim, rope_dim, out);
}

}  // namespace mlaserve
