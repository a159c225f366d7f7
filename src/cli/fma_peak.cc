#include "cli/fma_peak.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/cpu_features.h"

namespace mlaserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Best of `repeats` timings of `chains` (a probe returning the FLOPs it did), alone and on every
// pool thread at once.
FmaPeak MeasurePeak(ThreadPool& pool, double (*chains)(int64_t, float*), int repeats) {
  constexpr int64_t kIterations = int64_t(1) << 23;
  constexpr float kSeed = 0.5f;
  const int threads = pool.num_threads();
  std::vector<float> sinks(size_t(threads) * 16, kSeed);  // a cache line per thread
  FmaPeak peak;
  for (int r = 0; r < repeats; ++r) {
    float sink = kSeed;
    const auto t0 = Clock::now();
    const double flops = chains(kIterations, &sink);
    peak.one_thread_flops =
        std::max(peak.one_thread_flops, flops / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  for (int r = 0; r < repeats; ++r) {
    std::vector<double> flops(size_t(threads), 0.0);
    const auto t0 = Clock::now();
    pool.RunOnAll([&](int thread) {
      float* sink = &sinks[size_t(thread) * 16];
      *sink = kSeed;
      flops[size_t(thread)] = chains(kIterations, sink);
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    double total = 0.0;
    for (double f : flops) total += f;
    peak.all_threads_flops = std::max(peak.all_threads_flops, total / seconds);
  }
  return peak;
}

}  // namespace

FmaPeak MeasureFmaPeak(ThreadPool& pool, const KernelSet& kernels, int repeats) {
  return MeasurePeak(pool, kernels.fma_chains, repeats);
}

std::optional<FmaPeak> MeasureBf16DotPeak(ThreadPool& pool, int repeats) {
  if (!GetCpuFeatures().avx512_bf16) return std::nullopt;
  return MeasurePeak(pool, Bf16DotChains, repeats);
}

std::optional<FmaPeak> MeasureInt8DotPeak(ThreadPool& pool, int repeats) {
  if (!GetCpuFeatures().avx512_vnni) return std::nullopt;
  return MeasurePeak(pool, Int8DotChains, repeats);
}

}  // namespace mlaserve::cli
