// The storage formats of the absorbed-MLA KV cache: parsing --kv-cache-dtype, the exact byte
// layout of one cache row per format, and the row codecs (quantize a row once when its token is
// computed; dequantize small tiles of rows when attention reads them).
//
// A row is one token in one layer: the latent c_kv (latent_dim = kv_lora_rank values: 512 for
// DeepSeek-V3) followed by the rope key k_pe (rope_dim = qk_rope_head_dim values: 64).
// D = latent_dim + rope_dim. Byte layouts (little-endian; fp4 codes two per byte, the lower
// element index in the low nibble); bytes for 512 + 64 in brackets:
//
//   f32        [0, 4D)  D fp32                                                         [2304]
//   bf16/fp16  [0, 2D)  D bf16 / fp16, rounded to nearest even, saturating           [1152]
//   fp8_e4m3   [0, D)   D E4M3 codes of value / tensor_scale                            [576]
//   fp8_e5m2   [0, D)   D E5M2 codes of value / tensor_scale (saturating)               [576]
//   fp8_ds_mla [0, L)                 L E4M3 codes of latent / block_scale              [656]
//              [L, L + 4*ceil(L/128)) one fp32 block_scale per 128 latent values
//              [.., + 2R)             R bf16 rope values, not quantized
//              (DeepSeek's FlashMLA layout: 512 + 16 + 128. block_scale = amax/448 rounded
//              UP to a power of two, so no latent value saturates.)
//   fp4_e2m1   [0, D/2)             D E2M1 codes, latent then rope                      [324]
//              [D/2, D/2 + nb16)    one E8M0 scale byte per block of 16: the latent's
//                                   ceil(L/16) blocks, then the rope's ceil(R/16)
//              (SGLang's rule: scale = 2^(ceil(log2(amax/6))), so no value saturates.)
//   mxfp4      [0, D/2)             D E2M1 codes                                        [306]
//              [D/2, D/2 + nb32)    one E8M0 scale per block of 32, latent then rope
//              (OCP MX rule: scale = 2^(floor(log2(amax)) - 2); values in (6, 8) x scale
//              saturate to 6 x scale.)
//   nvfp4      [0, D/2)             D E2M1 codes                                        [324]
//              [D/2, D/2 + nb16)    one UE4M3 scale per block of 16, latent then rope;
//                                   value = e2m1 * ue4m3 * tensor_scale, where the per-tensor
//                                   fp32 tensor_scale (one per layer) is not in the row.
//
// Scale blocks never mix latent and rope values (their magnitudes differ); a part whose size is
// not a multiple of the block gets a shorter last block (e.g. rope 8 with mxfp4: one block of 8).
// An all-zero block stores scale 1.0. NaN inputs read back as NaN: per value for f32/bf16/fp16/
// fp8 (E4M3 0x7F, E5M2 0x7E), per block for fp4 formats (scale byte 0xFF, or 0x7F for nvfp4).
// +-inf inputs saturate to the largest finite value the row can hold (f32 alone stores them
// as they are); block scales are computed from the finite values only.
#pragma once

#include <cstddef>
#include <string_view>

#include "core/status.h"

namespace mlaserve {

enum class KvFormat {
  kF32,       // reference, 4 bytes a value
  kBF16,
  kFP16,
  kFP8E4M3,   // per-tensor scale (SGLang fp8_e4m3)
  kFP8E5M2,   // per-tensor scale (SGLang fp8_e5m2)
  kFP8DsMla,  // FlashMLA / vLLM fp8_ds_mla: per-128 power-of-two scales, bf16 rope
  kFP4E2M1,   // SGLang fp4_e2m1: 16-value blocks, E8M0 exponent scales rounded up
  kMXFP4,     // OCP MXFP4: 32-value blocks, E8M0 scales rounded down
  kNVFP4,     // NVFP4: 16-value blocks, UE4M3 scales, per-tensor fp32 scale
};

// Every format, in the order tables list them (kv-eval, plan).
inline constexpr KvFormat kAllKvFormats[] = {
    KvFormat::kF32,     KvFormat::kBF16,     KvFormat::kFP16,  KvFormat::kFP8E4M3, KvFormat::kFP8E5M2,
    KvFormat::kFP8DsMla, KvFormat::kFP4E2M1, KvFormat::kMXFP4, KvFormat::kNVFP4};

// Parses a --kv-cache-dtype value. Accepted (case-insensitive): auto, bf16, bfloat16, fp16,
// float16, fp32, float32, fp8 (= fp8_e4m3, as in vLLM), fp8_e4m3, fp8_e5m2, fp8_ds_mla (alias
// fp8_flashmla), fp4_e2m1, mxfp4, nvfp4. `auto` resolves to the model's activation dtype
// `model_dtype_for_auto` (a config torch_dtype or a DTypeName: bf16/bfloat16 -> bf16,
// f16/fp16/float16/half -> fp16; f32/fp32/float32 and fp8 checkpoint dtypes -> bf16, since the
// cache holds activations and bf16 is what serving engines use for them; empty -> bf16).
// An unknown name is an error that quotes it and lists the valid names.
Result<KvFormat> ParseKvCacheDtype(std::string_view name, std::string_view model_dtype_for_auto);

// The canonical --kv-cache-dtype spelling: "bf16", "fp8_ds_mla", ...
const char* KvFormatName(KvFormat format);

// Whether the codec reads `tensor_scale` (fp8_e4m3, fp8_e5m2, nvfp4); the others ignore it.
bool KvFormatUsesTensorScale(KvFormat format);

// Dims every format accepts: 1 <= latent_dim, 0 <= rope_dim, latent_dim + rope_dim <= 65536.
// fp4 formats also need both even, so a packed byte never straddles latent and rope. Call once
// at start-up; the functions below treat violations as bugs (MLA_CHECK).
Status ValidateKvFormatDims(KvFormat format, int latent_dim, int rope_dim);

// Where each part of a row lives; see the table at the top of this file.
struct KvRowLayout {
  size_t row_bytes = 0;
  size_t rope_offset = 0;    // first byte holding rope values (fp4: D/2 codes start at 0, rope
                             // codes at L/2; fp8_ds_mla: the bf16 rope after the scales)
  size_t scales_offset = 0;  // first scale byte; == row_bytes when the format has none
  int block_values = 0;      // values per scale block; 0 when the format has no block scales
  int num_latent_scales = 0;
  int num_rope_scales = 0;   // latent scales first, then rope scales
  int scale_bytes = 0;       // 4 (fp32, fp8_ds_mla), 1 (E8M0 / UE4M3), 0 (none)
};
KvRowLayout KvRowLayoutFor(KvFormat format, int latent_dim, int rope_dim);

// Bytes of one row (one token, one layer). For 512 + 64: f32 2304, bf16/fp16 1152, fp8 576,
// fp8_ds_mla 656, fp4_e2m1 324, mxfp4 306, nvfp4 324 (nvfp4's per-layer fp32 scale not counted).
size_t KvRowBytes(KvFormat format, int latent_dim, int rope_dim);

// The calibrated per-tensor scale for an observed absolute maximum `amax` of a layer's rows:
// fp8_e4m3 amax/448, fp8_e5m2 amax/57344 (so amax maps to the format's max), nvfp4
// amax/(448*6) (so the largest block scale is 448). 1.0 for other formats, and for an amax
// that is zero, negative or not finite.
float KvTensorScaleFor(KvFormat format, float amax);

// Quantizes one row. row: [latent_dim + rope_dim] fp32, the latent then the rope key.
// dst: KvRowBytes(format, latent_dim, rope_dim) bytes, any alignment. tensor_scale (positive,
// finite when the format uses it): fp8_e4m3/e5m2 store value / tensor_scale (SGLang's k_scale
// semantics; 1.0 without calibration); nvfp4 uses it as its per-tensor fp32 scale.
void QuantizeKvRow(KvFormat format, const float* row, int latent_dim, int rope_dim,
                   float tensor_scale, std::byte* dst);

// Dequantizes a tile of rows for attention. src: num_rows rows, row r at src + r *
// row_stride_bytes (>= KvRowBytes). out: [num_rows, latent_dim + rope_dim] fp32, contiguous.
// tensor_scale must be the one the rows were quantized with. Never allocates. Runs the decoder
// of DefaultKvCodec() (kv_codec.h): AVX2 / AVX-512 where the kernels use them, bit-identical to
// the scalar reference.
void DequantizeKvRows(KvFormat format, const std::byte* src, int num_rows,
                      size_t row_stride_bytes, int latent_dim, int rope_dim, float tensor_scale,
                      float* out);

}  // namespace mlaserve
