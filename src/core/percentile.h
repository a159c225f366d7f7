// The one percentile every report uses: numpy's default (linear interpolation between the
// closest ranks), which is what SGLang's bench_serving prints, so mlaserve's figures compare
// with SGLang's directly.
#pragma once

#include <algorithm>
#include <vector>

namespace mlaserve {

// The p-th percentile of v, p in [0, 100]; 0 for an empty v (as SGLang reports no requests).
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(rank);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - double(lo));
}

}  // namespace mlaserve
