// The machine's read bandwidth, measured in the run that reports figures against it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/thread_pool.h"

namespace mlaserve::cli {

// One way of reading a buffer: `streams` sequential streams per thread side by side, each asking
// for its data `ahead_bytes` ahead (0: hardware prefetchers alone), with 512-bit loads or plain
// 64-bit words.
struct ReadVariant {
  int streams = 4;
  size_t ahead_bytes = 2048;
  bool avx512 = false;
  std::string Name() const;
};

struct ReadRate {
  ReadVariant variant;
  double bytes_per_s = 0.0;
};

// Best-of-`repeats` read bandwidth in bytes/s over a `bytes` buffer (much larger than the
// caches, in 2 MB pages where the kernel grants them), every pool thread reading a disjoint slice:
// the access pattern of a decode step's weight reads. The best of every variant this CPU runs
// (ReadVariants), so that no kernel can read faster than "the machine's bandwidth" by reading
// smarter than the probe. rates (optional): each variant's figure.
double MeasureReadBandwidth(ThreadPool& pool, size_t bytes, int repeats, std::vector<ReadRate>* rates = nullptr);

// The variants MeasureReadBandwidth tries: 1 stream with no software prefetch (STREAM-like: a
// plain sum over the buffer), and 4 or 8 streams prefetching 2 or 4 KB ahead, with 512-bit loads
// where the CPU has AVX-512.
std::vector<ReadVariant> ReadVariants();

// The AVX-512 read loop (read_bandwidth_avx512.cc): sums `len` bytes from each of `streams`
// streams `stride` bytes apart, 64 bytes per stream in turn. Only where GetCpuFeatures().avx512.
uint64_t ReadStreamsAvx512(const std::byte* p, size_t len, int streams, size_t stride, size_t ahead_bytes);

}  // namespace mlaserve::cli
