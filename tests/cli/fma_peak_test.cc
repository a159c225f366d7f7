// The FMA peak probe of every kernel table this CPU runs: a rate, and one that more threads do
// not lower.
#include "cli/fma_peak.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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

}  // namespace
}  // namespace mlaserve::cli
