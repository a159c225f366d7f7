// The machine's fp32 FMA peak for a kernel table, measured in the run that reports figures
// against it (the compute roofline, as read_bandwidth.h is the memory one).
#pragma once

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

}  // namespace mlaserve::cli
