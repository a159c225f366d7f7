// The machine's compute peaks, measured in the run that reports figures against them (the compute
// roofline, as read_bandwidth.h is the memory one): the fp32 FMA peak of a kernel table, and the
// bf16 dot-product peak (vdpbf16ps) where the CPU has AVX512-BF16.
#pragma once

#include <cstdint>
#include <optional>

#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace mlaserve::cli {

struct FmaPeak {
  double one_thread_flops = 0.0;   // FLOP/s of the calling thread alone
  double all_threads_flops = 0.0;  // FLOP/s of every pool thread at once
};

// Best of `repeats` runs of the table's fma_chains probe (2 FLOP per multiply-add lane), first on
// the calling thread alone, then on every pool thread at once. Each run is 2^23 rounds of the
// chains: tens of milliseconds on a SIMD table, about ten times that on the portable one.
[[nodiscard]] FmaPeak MeasureFmaPeak(ThreadPool& pool, const KernelSet& kernels, int repeats = 5);

// The same for Bf16DotChains; nullopt where the CPU lacks AVX512-BF16. Informational while the
// kernels compute in fp32 FMA: it is the ceiling a vdpbf16ps matmul would have.
[[nodiscard]] std::optional<FmaPeak> MeasureBf16DotPeak(ThreadPool& pool, int repeats = 5);

// The same for Int8DotChains (operations: 2 per int8 multiply-add); nullopt where the CPU lacks
// AVX512-VNNI. The ceiling of the +int8 tables' products (GGUF block types, int4-g32).
[[nodiscard]] std::optional<FmaPeak> MeasureInt8DotPeak(ThreadPool& pool, int repeats = 5);

// Chains the bf16 probe keeps in flight: vdpbf16ps's latency is longer than an FMA's on some
// cores (kFmaChains = 12 chains measured 385-390 GFLOP/s a thread on an AMD EPYC host where the
// decode attention's scores kernel reached ~430; 24 measure 431-439), and 24 accumulators leave
// registers for the operands.
inline constexpr int kBf16Chains = 24;

// The bf16 probe (bf16_peak_avx512bf16.cc, the one file compiled with -mavx512bf16): like
// KernelSet::fma_chains, `iterations` rounds of kBf16Chains independent vdpbf16ps chains, each
// instruction 16 lanes x 2 bf16 pairs = 64 FLOPs; *sink: a seed in (0, 1) in, the chains' sum
// (16 x kBf16Chains) out. Only where GetCpuFeatures().avx512_bf16.
double Bf16DotChains(int64_t iterations, float* sink);

// Chains the int8 probe keeps in flight (as many as the bf16 probe's: vpdpbusd's latency is of the
// same order).
inline constexpr int kInt8Chains = 24;

// The int8 probe (int8_peak_avx512vnni.cc): `iterations` rounds of kInt8Chains independent
// vpdpbusd chains, each instruction 16 lanes x 4 byte products = 128 operations; *sink: a seed in
// (0, 1) in, the chains' sum (16 x kInt8Chains) out. Only where GetCpuFeatures().avx512_vnni.
double Int8DotChains(int64_t iterations, float* sink);

}  // namespace mlaserve::cli
