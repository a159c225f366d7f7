// Cache rows widened to bf16 exactly, for the decode attention kernels that multiply bf16 rows
// (kernels/latent_attention.h): the formats whose every value is a bf16 number, up to one
// per-layer tensor scale the caller applies to the products instead (plain fp8's k_scale).
//   bf16:       the stored values
//   fp8_e4m3:   the codes' values (every e4m3 value is a bf16 value), without the tensor scale
//   fp8_ds_mla: codes x their block's power-of-two scale (exact while the product is a normal
//               number: a block scale of at least 2^-100, i.e. any block whose largest magnitude
//               is above ~1e-28; smaller blocks read as zero), and the bf16 rope as stored
// fp16, fp32 and e5m2 rows are not all bf16 values (fp16, fp32) or not taken here yet (e5m2), nor
// are the fp4 formats: attention dequantizes those to fp32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvcache/kv_format.h"

namespace mlaserve {

// Whether WidenKvRowsBf16 takes `format`.
bool KvRowsWidenToBf16(KvFormat format);
// The factor the widened values are to be multiplied by to be the rows' values: the tensor
// scale for plain fp8, 1 otherwise.
float KvWidenedScale(KvFormat format, float tensor_scale);

// out[r * (latent_dim + rope_dim) + i]: row r's value i in bf16 (as above), r < num_rows; row r at
// src + r * row_stride_bytes. AVX-512 where the CPU has it (bit-identical to the scalar reference).
void WidenKvRowsBf16(KvFormat format, const std::byte* src, int num_rows, size_t row_stride_bytes, int latent_dim,
                     int rope_dim, uint16_t* out);
// The scalar reference: each value decoded to fp32 (fp8.h's tables), then its bf16 bits.
void WidenKvRowsBf16Reference(KvFormat format, const std::byte* src, int num_rows, size_t row_stride_bytes,
                              int latent_dim, int rope_dim, uint16_t* out);

namespace avx512 {
// kv_widen_bf16_avx512.cc: only where CpuSupports(KernelIsa::kAvx512). Same contract.
void WidenKvRowsBf16(KvFormat format, const std::byte* src, int num_rows, size_t row_stride_bytes, int latent_dim,
                     int rope_dim, uint16_t* out);
}  // namespace avx512

}  // namespace mlaserve
