// bench-kernels' decode attention table (bench_decode_attention.cc).
#pragma once

#include <optional>
#include <random>
#include <vector>

#include "cli/fma_peak.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace mlaserve::cli {

// AttendLatentSplits over a 4K context of a layer per table in `tables`, KV format (bf16,
// fp8_ds_mla, fp8_e4m3) and head count (16, 128), on one thread and on the pool, against the
// bound at the peaks fma and bf16 (none where the CPU lacks AVX512-BF16); then the
// heads-in-lanes kernels alone on one tile, where a table in `tables` has them.
void PrintDecodeAttentionTable(const std::vector<const KernelSet*>& tables, ThreadPool& pool, const FmaPeak& fma,
                               const std::optional<FmaPeak>& bf16, std::mt19937& rng);

}  // namespace mlaserve::cli
