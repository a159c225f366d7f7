// KV cache formats: --kv-cache-dtype parsing, row layouts, and the row codecs. The layouts and
// the scale rules are documented in kv_format.h and docs/kv-formats.md; this file is the one
// place that implements them, except the decoding of tiles of rows, which kv_codec_rows.h
// writes once for the scalar reference (PortableKvCodec, here) and the SIMD codecs.
#include "kvcache/kv_format.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/check.h"
#include "core/float16.h"
#include "kvcache/fp4.h"
#include "kvcache/fp8.h"
#include "kvcache/kv_codec.h"
#include "kvcache/kv_codec_rows.h"

namespace mlaserve {
namespace {

// ---- Names ------------------------------------------------------------------------------

struct KvFormatSpelling {
  std::string_view name;
  KvFormat format;
};

// Canonical spelling first for each format (KvFormatName returns it).
constexpr KvFormatSpelling kSpellings[] = {
    {"fp32", KvFormat::kF32},          {"float32", KvFormat::kF32},
    {"bf16", KvFormat::kBF16},         {"bfloat16", KvFormat::kBF16},
    {"fp16", KvFormat::kFP16},         {"float16", KvFormat::kFP16},
    {"fp8_e4m3", KvFormat::kFP8E4M3},  {"fp8", KvFormat::kFP8E4M3},
    {"fp8_e5m2", KvFormat::kFP8E5M2},  {"fp8_ds_mla", KvFormat::kFP8DsMla},
    {"fp8_flashmla", KvFormat::kFP8DsMla}, {"fp4_e2m1", KvFormat::kFP4E2M1},
    {"mxfp4", KvFormat::kMXFP4},       {"nvfp4", KvFormat::kNVFP4},
};

std::string ToLower(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  }
  return lower;
}

std::string ValidNames() {
  std::string names = "auto";
  for (const KvFormatSpelling& spelling : kSpellings) {
    names += ", ";
    names += spelling.name;
  }
  return names;
}

Result<KvFormat> ResolveAuto(std::string_view model_dtype) {
  const std::string dtype = ToLower(model_dtype);
  if (dtype.empty() || dtype == "bf16" || dtype == "bfloat16") return KvFormat::kBF16;
  if (dtype == "f16" || dtype == "fp16" || dtype == "float16" || dtype == "half") {
    return KvFormat::kFP16;
  }
  // An fp32 model still caches bf16 (half the bytes, and what engines do); fp8 checkpoints run
  // their activations in bf16.
  if (dtype == "f32" || dtype == "fp32" || dtype == "float32" || dtype == "float") {
    return KvFormat::kBF16;
  }
  if (dtype == "fp8" || dtype == "f8_e4m3" || dtype == "float8_e4m3fn" || dtype == "f8_e5m2" ||
      dtype == "float8_e5m2") {
    return KvFormat::kBF16;
  }
  return Status::Error("kv cache dtype 'auto': cannot resolve the model dtype '" +
                       std::string(model_dtype) + "' (expected bf16, fp16, f32 or an fp8 dtype)");
}

// ---- Dims and layouts -------------------------------------------------------------------

constexpr int kMaxRowValues = 65536;
constexpr int kDsMlaBlock = 128;
constexpr int kFp4E2M1Block = 16;
constexpr int kMxfp4Block = 32;
constexpr int kNvfp4Block = 16;

bool IsFp4(KvFormat format) {
  return format == KvFormat::kFP4E2M1 || format == KvFormat::kMXFP4 ||
         format == KvFormat::kNVFP4;
}

bool DimsOk(KvFormat format, int latent_dim, int rope_dim) {
  if (latent_dim < 1 || rope_dim < 0 || latent_dim > kMaxRowValues - rope_dim) return false;
  if (IsFp4(format) && (latent_dim % 2 != 0 || rope_dim % 2 != 0)) return false;
  return true;
}

int CeilDiv(int a, int b) { return (a + b - 1) / b; }

int Fp4BlockValues(KvFormat format) {
  switch (format) {
    case KvFormat::kFP4E2M1: return kFp4E2M1Block;
    case KvFormat::kMXFP4: return kMxfp4Block;
    case KvFormat::kNVFP4: return kNvfp4Block;
    default: return 0;
  }
}

// ---- Block scale rules ------------------------------------------------------------------

// The largest finite |value| of a block (0 when none), and whether the block holds a NaN.
struct BlockStats {
  float finite_amax = 0.0f;
  bool has_nan = false;
};

BlockStats ScanBlock(const float* values, int count) {
  BlockStats stats;
  for (int i = 0; i < count; ++i) {
    const float magnitude = std::fabs(values[i]);
    if (magnitude != magnitude) {
      stats.has_nan = true;
    } else if (magnitude <= FLT_MAX && magnitude > stats.finite_amax) {
      stats.finite_amax = magnitude;
    }
  }
  return stats;
}

// The smallest k with limit * 2^k >= amax (amax > 0, finite): ceil(log2(amax / limit)) without
// the rounding of the division. Products with powers of two are exact in double here.
int CeilLog2Ratio(float amax, float limit) {
  int k = 0;
  std::frexp(double(amax) / double(limit), &k);  // the ratio is in [2^(k-1), 2^k), roughly
  while (double(limit) * std::ldexp(1.0, k - 1) >= double(amax)) --k;
  while (double(limit) * std::ldexp(1.0, k) < double(amax)) ++k;
  return k;
}

// fp8_ds_mla: amax / 448 rounded up to a power of two (1.0 for an all-zero block), kept a
// normal fp32.
float DsMlaBlockScale(float finite_amax) {
  if (finite_amax == 0.0f) return 1.0f;
  const int exponent = std::clamp(CeilLog2Ratio(finite_amax, kE4M3Max), -126, 127);
  return minifloat::ExactPow2(exponent);
}

// fp4_e2m1 (SGLang): exponent ceil(log2(amax / 6)), stored + 127 in an E8M0 byte.
uint8_t Fp4E2M1ScaleCode(float finite_amax) {
  if (finite_amax == 0.0f) return kE8M0OneCode;
  return E8M0FromExponent(CeilLog2Ratio(finite_amax, kE2M1Max));
}

// mxfp4 (OCP MX): exponent floor(log2(amax)) - emax_elem, emax_elem = 2 for E2M1.
uint8_t Mxfp4ScaleCode(float finite_amax) {
  if (finite_amax == 0.0f) return kE8M0OneCode;
  constexpr int kE2M1MaxExponent = 2;  // 6 = 1.5 * 2^2
  return E8M0FromExponent(std::ilogb(finite_amax) - kE2M1MaxExponent);
}

// nvfp4: the block scale amax / 6 relative to the per-tensor scale, rounded to UE4M3.
uint8_t Nvfp4ScaleCode(float finite_amax, float tensor_scale) {
  return F32ToUE4M3(finite_amax / kE2M1Max / tensor_scale);
}

// ---- Quantize ---------------------------------------------------------------------------

void StoreU16(std::byte* dst, uint16_t value) { std::memcpy(dst, &value, sizeof(value)); }

// bf16 that saturates like the other formats: +-inf and values that would round past the
// largest finite bf16 become +-3.3895e38. NaN stays NaN (std::clamp passes it through).
uint16_t F32ToBf16Saturating(float value) {
  constexpr float kBf16Max = std::bit_cast<float>(0x7f7f0000u);
  return F32ToBf16(std::clamp(value, -kBf16Max, kBf16Max));
}

// Quantizes `count` values (even) into E2M1 codes at `codes` (count / 2 bytes) with one scale
// per block, the scale bytes at `scales`.
void QuantizeFp4Part(KvFormat format, const float* values, int count, float tensor_scale,
                     uint8_t* codes, uint8_t* scales) {
  const int block_values = Fp4BlockValues(format);
  for (int start = 0, block = 0; start < count; start += block_values, ++block) {
    const int n = std::min(block_values, count - start);
    const float* block_in = values + start;
    const BlockStats stats = ScanBlock(block_in, n);
    uint8_t scale_code = 0;
    float scale = 0.0f;
    switch (format) {
      case KvFormat::kFP4E2M1:
        scale_code = Fp4E2M1ScaleCode(stats.finite_amax);
        scale = E8M0ToF32(scale_code);
        break;
      case KvFormat::kMXFP4:
        scale_code = Mxfp4ScaleCode(stats.finite_amax);
        scale = E8M0ToF32(scale_code);
        break;
      case KvFormat::kNVFP4:
        scale_code = Nvfp4ScaleCode(stats.finite_amax, tensor_scale);
        scale = UE4M3ToF32(scale_code) * tensor_scale;
        break;
      default: MLA_CHECK(false);
    }
    // A scale that rounded to zero (nvfp4, a block tiny next to the tensor) stores zeros.
    const float inverse_scale = scale > 0.0f ? 1.0f / scale : 0.0f;
    uint8_t* block_codes = codes + start / 2;
    for (int i = 0; i < n; i += 2) {
      block_codes[i / 2] = PackE2M1Pair(F32ToE2M1(block_in[i] * inverse_scale),
                                        F32ToE2M1(block_in[i + 1] * inverse_scale));
    }
    if (stats.has_nan) scale_code = format == KvFormat::kNVFP4 ? kE4M3NanCode : kE8M0NanCode;
    scales[block] = scale_code;
  }
}

void CheckTensorScale(KvFormat format, float tensor_scale) {
  if (KvFormatUsesTensorScale(format)) MLA_CHECK(tensor_scale > 0.0f && tensor_scale <= FLT_MAX);
}

}  // namespace

Result<KvFormat> ParseKvCacheDtype(std::string_view name, std::string_view model_dtype_for_auto) {
  const std::string lower = ToLower(name);
  if (lower == "auto") return ResolveAuto(model_dtype_for_auto);
  for (const KvFormatSpelling& spelling : kSpellings) {
    if (lower == spelling.name) return spelling.format;
  }
  return Status::Error("unknown kv cache dtype '" + std::string(name) +
                       "' (valid: " + ValidNames() + ")");
}

const char* KvFormatName(KvFormat format) {
  switch (format) {
    case KvFormat::kF32: return "fp32";
    case KvFormat::kBF16: return "bf16";
    case KvFormat::kFP16: return "fp16";
    case KvFormat::kFP8E4M3: return "fp8_e4m3";
    case KvFormat::kFP8E5M2: return "fp8_e5m2";
    case KvFormat::kFP8DsMla: return "fp8_ds_mla";
    case KvFormat::kFP4E2M1: return "fp4_e2m1";
    case KvFormat::kMXFP4: return "mxfp4";
    case KvFormat::kNVFP4: return "nvfp4";
  }
  return "?";
}

bool KvFormatUsesTensorScale(KvFormat format) {
  return format == KvFormat::kFP8E4M3 || format == KvFormat::kFP8E5M2 ||
         format == KvFormat::kNVFP4;
}

Status ValidateKvFormatDims(KvFormat format, int latent_dim, int rope_dim) {
  if (DimsOk(format, latent_dim, rope_dim)) return Status::Ok();
  std::string message = std::string("kv cache dtype ") + KvFormatName(format) +
                        ": unsupported dims latent " + std::to_string(latent_dim) + " + rope " +
                        std::to_string(rope_dim) + " (need latent >= 1, rope >= 0, total <= " +
                        std::to_string(kMaxRowValues);
  if (IsFp4(format)) message += ", both even for fp4 packing";
  return Status::Error(message + ")");
}

KvRowLayout KvRowLayoutFor(KvFormat format, int latent_dim, int rope_dim) {
  MLA_CHECK(DimsOk(format, latent_dim, rope_dim));
  const size_t latent = size_t(latent_dim), rope = size_t(rope_dim), row_dim = latent + rope;
  KvRowLayout layout;
  switch (format) {
    case KvFormat::kF32:
      layout.row_bytes = 4 * row_dim;
      layout.rope_offset = 4 * latent;
      break;
    case KvFormat::kBF16:
    case KvFormat::kFP16:
      layout.row_bytes = 2 * row_dim;
      layout.rope_offset = 2 * latent;
      break;
    case KvFormat::kFP8E4M3:
    case KvFormat::kFP8E5M2:
      layout.row_bytes = row_dim;
      layout.rope_offset = latent;
      break;
    case KvFormat::kFP8DsMla:
      layout.block_values = kDsMlaBlock;
      layout.num_latent_scales = CeilDiv(latent_dim, kDsMlaBlock);
      layout.scale_bytes = 4;
      layout.scales_offset = latent;
      layout.rope_offset = latent + 4 * size_t(layout.num_latent_scales);
      layout.row_bytes = layout.rope_offset + 2 * rope;
      break;
    case KvFormat::kFP4E2M1:
    case KvFormat::kMXFP4:
    case KvFormat::kNVFP4:
      layout.block_values = Fp4BlockValues(format);
      layout.num_latent_scales = CeilDiv(latent_dim, layout.block_values);
      layout.num_rope_scales = CeilDiv(rope_dim, layout.block_values);
      layout.scale_bytes = 1;
      layout.rope_offset = latent / 2;
      layout.scales_offset = row_dim / 2;
      layout.row_bytes =
          layout.scales_offset + size_t(layout.num_latent_scales + layout.num_rope_scales);
      break;
  }
  if (layout.scale_bytes == 0) layout.scales_offset = layout.row_bytes;
  return layout;
}

size_t KvRowBytes(KvFormat format, int latent_dim, int rope_dim) {
  return KvRowLayoutFor(format, latent_dim, rope_dim).row_bytes;
}

float KvTensorScaleFor(KvFormat format, float amax) {
  if (!(amax > 0.0f && amax <= FLT_MAX)) return 1.0f;
  switch (format) {
    case KvFormat::kFP8E4M3: return amax / kE4M3Max;
    case KvFormat::kFP8E5M2: return amax / kE5M2Max;
    case KvFormat::kNVFP4: return amax / (kE4M3Max * kE2M1Max);
    default: return 1.0f;
  }
}

void QuantizeKvRow(KvFormat format, const float* row, int latent_dim, int rope_dim,
                   float tensor_scale, std::byte* dst) {
  const KvRowLayout layout = KvRowLayoutFor(format, latent_dim, rope_dim);
  CheckTensorScale(format, tensor_scale);
  const int row_dim = latent_dim + rope_dim;
  auto* bytes = reinterpret_cast<uint8_t*>(dst);
  switch (format) {
    case KvFormat::kF32:
      std::memcpy(dst, row, size_t(row_dim) * sizeof(float));
      return;
    case KvFormat::kBF16:
      for (int i = 0; i < row_dim; ++i) StoreU16(dst + 2 * i, F32ToBf16Saturating(row[i]));
      return;
    case KvFormat::kFP16:
      // Saturate: F32ToF16 alone would turn |x| > 65504 into inf. std::clamp keeps NaN.
      for (int i = 0; i < row_dim; ++i) {
        StoreU16(dst + 2 * i, F32ToF16(std::clamp(row[i], -65504.0f, 65504.0f)));
      }
      return;
    case KvFormat::kFP8E4M3:
      for (int i = 0; i < row_dim; ++i) bytes[i] = F32ToE4M3(row[i] / tensor_scale);
      return;
    case KvFormat::kFP8E5M2:
      for (int i = 0; i < row_dim; ++i) bytes[i] = F32ToE5M2(row[i] / tensor_scale);
      return;
    case KvFormat::kFP8DsMla: {
      for (int block = 0; block < layout.num_latent_scales; ++block) {
        const int start = block * kDsMlaBlock;
        const int end = std::min(start + kDsMlaBlock, latent_dim);
        const float scale = DsMlaBlockScale(ScanBlock(row + start, end - start).finite_amax);
        const float inverse_scale = 1.0f / scale;  // exact: scale is a power of two
        for (int i = start; i < end; ++i) bytes[i] = F32ToE4M3(row[i] * inverse_scale);
        std::memcpy(dst + layout.scales_offset + 4 * size_t(block), &scale, sizeof(scale));
      }
      std::byte* rope = dst + layout.rope_offset;
      for (int i = 0; i < rope_dim; ++i) {
        StoreU16(rope + 2 * i, F32ToBf16Saturating(row[latent_dim + i]));
      }
      return;
    }
    case KvFormat::kFP4E2M1:
    case KvFormat::kMXFP4:
    case KvFormat::kNVFP4: {
      uint8_t* scales = bytes + layout.scales_offset;
      QuantizeFp4Part(format, row, latent_dim, tensor_scale, bytes, scales);
      QuantizeFp4Part(format, row + latent_dim, rope_dim, tensor_scale,
                      bytes + layout.rope_offset, scales + layout.num_latent_scales);
      return;
    }
  }
}

void DequantizeKvRows(KvFormat format, const std::byte* src, int num_rows,
                      size_t row_stride_bytes, int latent_dim, int rope_dim, float tensor_scale,
                      float* out) {
  const KvRowLayout layout = KvRowLayoutFor(format, latent_dim, rope_dim);
  MLA_CHECK(num_rows >= 0 && (num_rows <= 1 || row_stride_bytes >= layout.row_bytes));
  CheckTensorScale(format, tensor_scale);
  DefaultKvCodec().dequantize_rows(format, src, num_rows, row_stride_bytes, layout, latent_dim, rope_dim,
                                   tensor_scale, out);
}

const KvCodec& PortableKvCodec() {
  static const KvCodec kCodec{KernelIsa::kPortable, "portable",
                              kv_codec::DequantizeRowsWith<kv_codec::ScalarParts>};
  return kCodec;
}

}  // namespace mlaserve
