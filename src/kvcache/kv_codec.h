// The per-instruction-set implementations of the KV row decoder behind DequantizeKvRows
// (kv_format.h). The portable one (kv_format.cc) is the plain scalar reference; the AVX2 and
// AVX-512 ones (kv_codec_avx2.cc, kv_codec_avx512.cc, one body in kv_codec_simd_impl.h) give
// bit-identical results. DequantizeKvRows uses the one of DefaultKernels()'s instruction set, so
// MLASERVE_KERNELS=portable|avx2|avx512 chooses the codec as it chooses the kernels.
// Quantization (QuantizeKvRow) has one implementation, the scalar one: see kv_format.cc.
#pragma once

#include <cstddef>

#include "kernels/kernels.h"
#include "kvcache/kv_format.h"

namespace mlaserve {

struct KvCodec {
  KernelIsa isa;
  const char* name;
  // DequantizeKvRows after its checks; `layout` is KvRowLayoutFor(format, latent_dim, rope_dim).
  // src: num_rows rows, row r at src + r * row_stride_bytes. out: [num_rows, latent_dim +
  // rope_dim] fp32.
  void (*dequantize_rows)(KvFormat format, const std::byte* src, int num_rows, size_t row_stride_bytes,
                          const KvRowLayout& layout, int latent_dim, int rope_dim, float tensor_scale,
                          float* out);
};

const KvCodec& PortableKvCodec();  // kv_format.cc
const KvCodec* Avx2KvCodec();      // nullptr when not compiled in
const KvCodec* Avx512KvCodec();    // nullptr when not compiled in

// The codec of `isa`; nullptr when this CPU cannot run it (CpuSupports) or it is not compiled in.
const KvCodec* KvCodecFor(KernelIsa isa);
// The codec of DefaultKernels()'s instruction set, chosen once.
const KvCodec& DefaultKvCodec();

}  // namespace mlaserve
