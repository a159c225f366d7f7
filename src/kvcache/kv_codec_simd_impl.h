// The SIMD KV row decoder, written once over a vector-traits type V and instantiated by each
// instruction-set file (kv_codec_avx2.cc, kv_codec_avx512.cc), compiled with that ISA's flags.
// Include only from those files. As in kernels/simd_kernels_impl.h, everything here lives in
// the namespace MLASERVE_SIMD_NS that the including file defines, so no inline function compiled
// for AVX-512 can be merged into a path that runs on a CPU without it.
//
// V provides kLanes, Reg, Broadcast(float), Mul(a, b), Store(float*, Reg), and loads that decode
// kLanes values exactly, bit for bit as the scalar tables of fp8.h / fp4.h / core/float16.h do
// (NaN payloads and signs included):
//   LoadBf16(p) (2 kLanes bytes), LoadF16(p) (fp16; NaNs keep their payload, no quiet bit
//   added), LoadE4M3(p), LoadE5M2(p) (kLanes codes), LoadE2M1(p) (kLanes / 2 bytes, low nibble
//   first).
// The decoded value is multiplied by the scale as the scalar code does (one fp32 multiply, the
// value first), so the rows are bit-identical to PortableKvCodec's. Runs shorter than a vector
// go to the scalar parts.
#include <cstddef>
#include <cstdint>

#include "kvcache/kv_codec_rows.h"

#ifndef MLASERVE_SIMD_NS
#error "define MLASERVE_SIMD_NS before including kv_codec_simd_impl.h"
#endif

namespace mlaserve::MLASERVE_SIMD_NS {

template <class V>
struct SimdKvParts {
  using Scalar = kv_codec::ScalarParts;

  static void Bf16(const uint8_t* src, int count, float* out) {
    int i = 0;
    for (; i + V::kLanes <= count; i += V::kLanes) V::Store(out + i, V::LoadBf16(src + 2 * i));
    Scalar::Bf16(src + 2 * i, count - i, out + i);
  }
  static void F16(const uint8_t* src, int count, float* out) {
    int i = 0;
    for (; i + V::kLanes <= count; i += V::kLanes) V::Store(out + i, V::LoadF16(src + 2 * i));
    Scalar::F16(src + 2 * i, count - i, out + i);
  }
  static void E4M3(const uint8_t* src, int count, float scale, float* out) {
    const typename V::Reg s = V::Broadcast(scale);
    int i = 0;
    for (; i + V::kLanes <= count; i += V::kLanes) V::Store(out + i, V::Mul(V::LoadE4M3(src + i), s));
    Scalar::E4M3(src + i, count - i, scale, out + i);
  }
  static void E5M2(const uint8_t* src, int count, float scale, float* out) {
    const typename V::Reg s = V::Broadcast(scale);
    int i = 0;
    for (; i + V::kLanes <= count; i += V::kLanes) V::Store(out + i, V::Mul(V::LoadE5M2(src + i), s));
    Scalar::E5M2(src + i, count - i, scale, out + i);
  }
  static void E2M1(const uint8_t* codes, int count, float scale, float* out) {
    const typename V::Reg s = V::Broadcast(scale);
    int i = 0;  // kLanes is even, so the tail count stays even
    for (; i + V::kLanes <= count; i += V::kLanes) V::Store(out + i, V::Mul(V::LoadE2M1(codes + i / 2), s));
    Scalar::E2M1(codes + i / 2, count - i, scale, out + i);
  }
  // Whole blocks of a multiple of kLanes values (16 and 32 here) in a tight loop: with a block
  // per vector, the per-block bookkeeping of E2M1 would cost more than the decoding.
  static void Fp4(const uint8_t* codes, const uint8_t* scales, int count, int block_values, const float* scale_table,
                  float scale_multiplier, float* out) {
    if (block_values % V::kLanes != 0) {
      return Scalar::Fp4(codes, scales, count, block_values, scale_table, scale_multiplier, out);
    }
    const int full_blocks = count / block_values, vectors_per_block = block_values / V::kLanes;
    for (int block = 0; block < full_blocks; ++block) {
      const typename V::Reg s = V::Broadcast(scale_table[scales[block]] * scale_multiplier);
      for (int v = 0; v < vectors_per_block; ++v) {
        V::Store(out, V::Mul(V::LoadE2M1(codes), s));
        out += V::kLanes;
        codes += V::kLanes / 2;
      }
    }
    const int done = full_blocks * block_values;
    if (done < count) E2M1(codes, count - done, scale_table[scales[full_blocks]] * scale_multiplier, out);
  }
};

template <class V>
void DequantizeRows(KvFormat format, const std::byte* src, int num_rows, size_t row_stride_bytes,
                    const KvRowLayout& layout, int latent_dim, int rope_dim, float tensor_scale, float* out) {
  kv_codec::DequantizeRowsWith<SimdKvParts<V>>(format, src, num_rows, row_stride_bytes, layout, latent_dim,
                                               rope_dim, tensor_scale, out);
}

}  // namespace mlaserve::MLASERVE_SIMD_NS
