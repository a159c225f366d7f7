#include "cli/read_bandwidth.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/cpu_features.h"

namespace mlaserve::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kHugePage = size_t(2) << 20;

// The portable loop: 64-bit words, 8 per cache line.
uint64_t ReadStreamsWords(const std::byte* p, size_t len, int streams, size_t stride, size_t ahead_bytes) {
  uint64_t acc[8] = {};
  for (size_t i = 0; i < len; i += 64) {
    for (int s = 0; s < streams; ++s) {
      const uint64_t* line = reinterpret_cast<const uint64_t*>(p + size_t(s) * stride + i);
      if (ahead_bytes != 0) __builtin_prefetch(reinterpret_cast<const std::byte*>(line) + ahead_bytes);
      for (int j = 0; j < 8; ++j) acc[j] += line[j];
    }
  }
  uint64_t sum = 0;
  for (uint64_t a : acc) sum += a;
  return sum;
}

}  // namespace

std::string ReadVariant::Name() const {
  return std::to_string(streams) + (streams == 1 ? " stream, " : " streams, ") +
         (ahead_bytes == 0 ? std::string("no prefetch") : "prefetch " + std::to_string(ahead_bytes / 1024) + " KB") +
         (avx512 ? ", 512-bit loads" : ", 64-bit loads");
}

std::vector<ReadVariant> ReadVariants() {
  const bool avx512 = GetCpuFeatures().avx512;
  std::vector<ReadVariant> v = {{1, 0, false}, {4, 2048, false}};
  if (avx512) {
    for (int streams : {4, 8}) {
      for (size_t ahead : {size_t{2048}, size_t{4096}}) v.push_back({streams, ahead, true});
    }
  }
  return v;
}

double MeasureReadBandwidth(ThreadPool& pool, size_t bytes, int repeats, std::vector<ReadRate>* rates) {
  // 2 MB aligned, and asked for in 2 MB pages: fewer TLB misses, as the weights' own pages get.
  bytes = std::max(kHugePage, (bytes + kHugePage - 1) / kHugePage * kHugePage);
  std::unique_ptr<std::byte, decltype(&std::free)> buffer(static_cast<std::byte*>(std::aligned_alloc(kHugePage, bytes)),
                                                          &std::free);
  if (buffer == nullptr) return 0.0;
  ::madvise(buffer.get(), bytes, MADV_HUGEPAGE);
  pool.ParallelFor(int64_t(bytes / kHugePage), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) std::memset(buffer.get() + size_t(i) * kHugePage, int(i & 0x7f), kHugePage);
  });
  std::vector<uint64_t> sums(size_t(pool.num_threads()), 0);
  double best_overall = 0.0;
  const size_t per = bytes / size_t(pool.num_threads()) / 64 * 64;  // each thread's slice
  for (const ReadVariant& v : ReadVariants()) {
    const size_t len = per / size_t(v.streams) / 64 * 64;  // bytes per stream, whole cache lines
    const double read_bytes = double(len) * v.streams * pool.num_threads();
    double best = 0.0;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = Clock::now();
      pool.RunOnAll([&](int thread) {
        const std::byte* p = buffer.get() + per * size_t(thread);
        sums[size_t(thread)] += v.avx512 ? ReadStreamsAvx512(p, len, v.streams, len, v.ahead_bytes)
                                         : ReadStreamsWords(p, len, v.streams, len, v.ahead_bytes);
      });
      best = std::max(best, read_bytes / std::chrono::duration<double>(Clock::now() - t0).count());
    }
    if (rates != nullptr) rates->push_back({v, best});
    best_overall = std::max(best_overall, best);
  }
  // The sums are the reads' only result: keep them observable.
  static volatile uint64_t sink;
  for (uint64_t s : sums) sink = sink + s;
  return best_overall;
}

}  // namespace mlaserve::cli
