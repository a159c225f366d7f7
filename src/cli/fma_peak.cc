#include "cli/fma_peak.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace mlaserve::cli {

using Clock = std::chrono::steady_clock;

FmaPeak MeasureFmaPeak(ThreadPool& pool, const KernelSet& kernels, int repeats) {
  constexpr int64_t kIterations = int64_t(1) << 23;
  constexpr float kSeed = 0.5f;
  const int threads = pool.num_threads();
  std::vector<float> sinks(size_t(threads) * 16, kSeed);  // a cache line per thread
  FmaPeak peak;
  for (int r = 0; r < repeats; ++r) {
    float sink = kSeed;
    const auto t0 = Clock::now();
    const double flops = kernels.fma_chains(kIterations, &sink);
    peak.one_thread_flops =
        std::max(peak.one_thread_flops, flops / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  for (int r = 0; r < repeats; ++r) {
    std::vector<double> flops(size_t(threads), 0.0);
    const auto t0 = Clock::now();
    pool.RunOnAll([&](int thread) {
      float* sink = &sinks[size_t(thread) * 16];
      *sink = kSeed;
      flops[size_t(thread)] = kernels.fma_chains(kIterations, sink);
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    double total = 0.0;
    for (double f : flops) total += f;
    peak.all_threads_flops = std::max(peak.all_threads_flops, total / seconds);
  }
  return peak;
}

}  // namespace mlaserve::cli
