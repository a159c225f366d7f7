// The best of repeated timings: what the bench tools report for a kernel or phase.
#pragma once

#include <algorithm>
#include <chrono>

namespace mlaserve::cli {

// Best of `repeats` timings of fn(), in seconds.
template <class Fn>
double BestSeconds(int repeats, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace mlaserve::cli
