// The FMA peak probe of every kernel table this CPU runs: a rate, and one that more threads do
// not lower.
#include "cli/fma_peak.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/cpu_features.h"
#include "support/kernel_tables.h"

namespace mlaserve::cli {
namespace {

TEST(FmaPeak, ChainsCountTwoFlopsPerLaneAndConverge) {
  for (const KernelSet* k : testing::RunnableKernelTables()) {
    float sink = 0.5f;
    const double flops = k->fma_chains(1000, &sink);
    // Lanes x chains x 2 x iterations, lanes 8 (portable, avx2) or 16 (avx512).
    const int lanes = k->isa == KernelIsa::kAvx512 ? 16 : 8;
    EXPECT_EQ(flops, 2.0 * lanes * kFmaChains * 1000) << k->name;
    // Every chain converges to 1 (acc = acc * b + (1 - b)), so the sum is the lane count.
    EXPECT_NEAR(sink, float(lanes * kFmaChains), 1e-2f) << k->name;
  }
}

// Both rates are positive and finite. (How the two compare is a timing property of a loaded
// machine, ctest running other tests beside this one: benchmarks report it, tests do not.)
TEST(FmaPeak, IsAPositiveRateForOneAndAllThreads) {
  ThreadPool pool(2);
  for (const KernelSet* k : testing::RunnableKernelTables()) {
    const FmaPeak peak = MeasureFmaPeak(pool, *k, /*repeats=*/3);
    EXPECT_TRUE(std::isfinite(peak.one_thread_flops)) << k->name;
    EXPECT_GT(peak.one_thread_flops, 1e8) << k->name;
    EXPECT_TRUE(std::isfinite(peak.all_threads_flops)) << k->name;
    EXPECT_GT(peak.all_threads_flops, 1e8) << k->name;
  }
}

TEST(FmaPeak, Bf16DotChainsCount64FlopsPerInstructionWhereTheCpuHasThem) {
  ThreadPool pool(2);
  const std::optional<FmaPeak> peak = MeasureBf16DotPeak(pool, /*repeats=*/3);
  EXPECT_EQ(peak.has_value(), GetCpuFeatures().avx512_bf16);
  if (!peak) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  float sink = 0.3f;
  EXPECT_EQ(Bf16DotChains(1000, &sink), 64.0 * kBf16Chains * 1000);
  // Each step adds s - s = 0 exactly: every chain keeps its seed 1, in each of 16 lanes.
  EXPECT_EQ(sink, float(16 * kBf16Chains));
  // Rates only: how one and all threads compare is a timing property of a loaded machine.
  EXPECT_TRUE(std::isfinite(peak->one_thread_flops));
  EXPECT_GT(peak->one_thread_flops, 1e9);
  EXPECT_TRUE(std::isfinite(peak->all_threads_flops));
  EXPECT_GT(peak->all_threads_flops, 1e9);
}

TEST(FmaPeak, Int8DotChainsCount128OperationsPerInstructionWhereTheCpuHasThem) {
  ThreadPool pool(2);
  const std::optional<FmaPeak> peak = MeasureInt8DotPeak(pool, /*repeats=*/3);
  EXPECT_EQ(peak.has_value(), GetCpuFeatures().avx512_vnni);
  if (!peak) GTEST_SKIP() << "this CPU has no AVX512-VNNI";
  float sink = 0.3f;
  EXPECT_EQ(Int8DotChains(1000, &sink), 128.0 * kInt8Chains * 1000);
  // Each step adds s - s + s - s = 0 exactly: every chain keeps its seed 1, in each of 16 lanes.
  EXPECT_EQ(sink, float(16 * kInt8Chains));
  EXPECT_TRUE(std::isfinite(peak->one_thread_flops));
  EXPECT_GT(peak->one_thread_flops, 1e9);
  EXPECT_TRUE(std::isfinite(peak->all_threads_flops));
  EXPECT_GT(peak->all_threads_flops, 1e9);
}

}  // namespace
}  // namespace mlaserve::cli
