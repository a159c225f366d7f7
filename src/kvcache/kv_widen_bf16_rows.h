// The row loop of WidenKvRowsBf16 (kv_widen_bf16.h), written once over a Parts type that widens
// a run of e4m3 codes: the scalar reference (kv_widen_bf16.cc) and the AVX-512 one
// (kv_widen_bf16_avx512.cc). Include only from those two files.
//   Parts::E4M3(codes, count, scale, out): out[i] = bf16 of the code's value times `scale`, a
//   power of two >= kMinDsMlaScale (1 for plain fp8), exactly.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "kvcache/kv_widen_bf16.h"

namespace mlaserve::kv_widen {

// Smallest ds_mla block scale whose products stay normal in bf16 (codes reach down to 2^-9);
// blocks with a smaller one read as signed zeros.
inline constexpr float kMinDsMlaScale = 0x1p-100f;

template <class Parts>
void WidenRowsWith(KvFormat format, const std::byte* src, int num_rows, size_t row_stride_bytes, int latent_dim,
                   int rope_dim, uint16_t* out) {
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
        Parts::E4M3(bytes, row_dim, 1.0f, row);
        break;
      case KvFormat::kFP8DsMla:
        for (int block = 0; block < layout.num_latent_scales; ++block) {
          float scale;
          std::memcpy(&scale, bytes + layout.scales_offset + 4 * size_t(block), sizeof scale);
          const int start = block * layout.block_values;
          const int count = std::min(start + layout.block_values, latent_dim) - start;
          if (scale >= kMinDsMlaScale) {
            Parts::E4M3(bytes + start, count, scale, row + start);
          } else {
            for (int i = start; i < start + count; ++i) row[i] = uint16_t(bytes[i] & 0x80u) << 8;
          }
        }
        std::memcpy(row + latent_dim, bytes + layout.rope_offset, size_t(rope_dim) * 2);
        break;
      default:
        MLA_CHECK(false);
    }
  }
}

}  // namespace mlaserve::kv_widen
