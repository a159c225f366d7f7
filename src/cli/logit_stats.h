// Small statistics over logits shared by the quality reports (kv-eval, weights-eval).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace mlaserve::cli {

// log-softmax of one row of `vocab` logits into out[vocab].
inline void LogSoftmax(const float* logits, int vocab, std::vector<double>& out) {
  const float max = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - max);
  const double log_sum = std::log(sum) + max;
  for (int i = 0; i < vocab; ++i) out[size_t(i)] = double(logits[i]) - log_sum;
}

// The q-quantile (0..1) of v, nearest rank; 0 for an empty v.
inline double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5))];
}

}  // namespace mlaserve::cli
