// The KV row decoder written once: DequantizeRowsWith<Parts> walks a tile of rows in any
// KvFormat (the byte layouts are in kv_format.h) and hands each contiguous run of same-kind
// values to Parts, which decodes it. ScalarParts (here) is the reference; the SIMD codecs
// (kv_codec_simd_impl.h) provide vector Parts that fall back to ScalarParts for the tail of a
// run shorter than a vector. Each Parts function writes out[i] for i in [0, count):
//   Bf16(src, count, out)           bf16 at src (2 bytes each)
//   F16(src, count, out)            fp16 at src
//   E4M3(src, count, scale, out)    E4M3 code * scale
//   E5M2(src, count, scale, out)    E5M2 code * scale
//   E2M1(codes, count, scale, out)  count (even) packed E2M1 codes * scale, low nibble first
//   Fp4(codes, scales, count, block_values, scale_table, scale_multiplier, out)
//                                   count (even) packed E2M1 codes, one scale byte per block of
//                                   block_values: code * (scale_table[byte] * scale_multiplier)
// Every value is one exact decode and at most one fp32 multiply, in that order, so any Parts
// that decodes exactly gives bit-identical rows.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/float16.h"
#include "kvcache/fp4.h"
#include "kvcache/fp8.h"
#include "kvcache/kv_format.h"

namespace mlaserve {
// Internal linkage on purpose: the ISA files compile this header with their own flags (see
// minifloat.h).
namespace {
namespace kv_codec {

inline uint16_t LoadU16(const uint8_t* src) {
  uint16_t value;
  std::memcpy(&value, src, sizeof(value));
  return value;
}

// fp16 -> fp32 without the branches of F16ToF32 (same results, all 65536 codes tested): the
// magnitude bits moved to fp32's position and multiplied by 2^112 re-bias the exponent, which
// also scales fp16 subnormals exactly; only inf/NaN need a select. NaN payloads are kept as
// they are (no quiet bit added).
inline float F16ToF32Fast(uint16_t half_bits) {
  const uint32_t sign = uint32_t(half_bits & 0x8000u) << 16;
  const uint32_t magnitude = uint32_t(half_bits & 0x7fffu) << 13;
  const uint32_t finite = std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) * 0x1p112f);
  const uint32_t special = magnitude | 0x7f800000u;  // inf, or NaN with its payload
  return std::bit_cast<float>(sign | (magnitude >= (0x7c00u << 13) ? special : finite));
}

struct ScalarParts {
  static void Bf16(const uint8_t* src, int count, float* out) {
    for (int i = 0; i < count; ++i) out[i] = Bf16ToF32(LoadU16(src + 2 * i));
  }
  static void F16(const uint8_t* src, int count, float* out) {
    for (int i = 0; i < count; ++i) out[i] = F16ToF32Fast(LoadU16(src + 2 * i));
  }
  static void E4M3(const uint8_t* src, int count, float scale, float* out) {
    for (int i = 0; i < count; ++i) out[i] = kE4M3ToF32[src[i]] * scale;
  }
  static void E5M2(const uint8_t* src, int count, float scale, float* out) {
    for (int i = 0; i < count; ++i) out[i] = kE5M2ToF32[src[i]] * scale;
  }
  // One table load per pair of values, no branches.
  static void E2M1(const uint8_t* codes, int count, float scale, float* out) {
    const float* pairs = kE2M1PairToF32.data();
    for (int j = 0; j < count / 2; ++j) {
      const float* pair = pairs + 2 * size_t(codes[j]);
      out[2 * j] = pair[0] * scale;
      out[2 * j + 1] = pair[1] * scale;
    }
  }
  static void Fp4(const uint8_t* codes, const uint8_t* scales, int count, int block_values, const float* scale_table,
                  float scale_multiplier, float* out) {
    for (int start = 0, block = 0; start < count; start += block_values, ++block) {
      const float scale = scale_table[scales[block]] * scale_multiplier;
      E2M1(codes + start / 2, std::min(block_values, count - start), scale, out + start);
    }
  }
};

// DequantizeKvRows after its checks; `layout` is KvRowLayoutFor(format, latent_dim, rope_dim).
template <class Parts>
void DequantizeRowsWith(KvFormat format, const std::byte* src, int num_rows, size_t row_stride_bytes,
                        const KvRowLayout& layout, int latent_dim, int rope_dim, float tensor_scale,
                        float* out) {
  const int row_dim = latent_dim + rope_dim;
  for (int r = 0; r < num_rows; ++r) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(src + size_t(r) * row_stride_bytes);
    float* row_out = out + size_t(r) * size_t(row_dim);
    switch (format) {
      case KvFormat::kF32:
        std::memcpy(row_out, bytes, size_t(row_dim) * sizeof(float));
        break;
      case KvFormat::kBF16:
        Parts::Bf16(bytes, row_dim, row_out);
        break;
      case KvFormat::kFP16:
        Parts::F16(bytes, row_dim, row_out);
        break;
      case KvFormat::kFP8E4M3:
        Parts::E4M3(bytes, row_dim, tensor_scale, row_out);
        break;
      case KvFormat::kFP8E5M2:
        Parts::E5M2(bytes, row_dim, tensor_scale, row_out);
        break;
      case KvFormat::kFP8DsMla: {
        for (int block = 0; block < layout.num_latent_scales; ++block) {
          float scale;
          std::memcpy(&scale, bytes + layout.scales_offset + 4 * size_t(block), sizeof(scale));
          const int start = block * layout.block_values;
          const int end = std::min(start + layout.block_values, latent_dim);
          Parts::E4M3(bytes + start, end - start, scale, row_out + start);
        }
        Parts::Bf16(bytes + layout.rope_offset, rope_dim, row_out + latent_dim);
        break;
      }
      case KvFormat::kFP4E2M1:
      case KvFormat::kMXFP4:
      case KvFormat::kNVFP4: {
        const float* scale_table = format == KvFormat::kNVFP4 ? kUE4M3ToF32.data() : kE8M0ToF32.data();
        const float multiplier = format == KvFormat::kNVFP4 ? tensor_scale : 1.0f;
        const uint8_t* scales = bytes + layout.scales_offset;
        Parts::Fp4(bytes, scales, latent_dim, layout.block_values, scale_table, multiplier, row_out);
        Parts::Fp4(bytes + layout.rope_offset, scales + layout.num_latent_scales, rope_dim, layout.block_values,
                   scale_table, multiplier, row_out + latent_dim);
        break;
      }
    }
  }
}

}  // namespace kv_codec
}  // namespace
}  // namespace mlaserve
