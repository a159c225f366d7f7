#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mlaserve {

double CounterUniform(uint64_t seed, uint64_t position) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + position + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) * (1.0 / 9007199254740992.0);
}

TokenId ArgMax(std::span<const float> logits) {
  return TokenId(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Sampler::Sampler(int vocab_size) : probs_(size_t(vocab_size)), order_(size_t(vocab_size)) {}

TokenId Sampler::Sample(std::span<const float> logits, const SamplingParams& p, int64_t position) {
  if (p.temperature <= 0.0f || p.top_k == 1) return ArgMax(logits);
  const int vocab = int(logits.size());
  std::iota(order_.begin(), order_.begin() + vocab, 0);
  // Candidates sorted by logit (ties by id, so the order is deterministic).
  int keep = p.top_k > 0 ? std::min(p.top_k, vocab) : vocab;
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  std::partial_sort(order_.begin(), order_.begin() + keep, order_.begin() + vocab, by_logit);
  const float max_logit = logits[size_t(order_[0])];
  double sum = 0.0;
  for (int i = 0; i < keep; ++i) {
    probs_[size_t(i)] = std::exp((logits[size_t(order_[size_t(i)])] - max_logit) / p.temperature);
    sum += probs_[size_t(i)];
  }
  if (p.top_p < 1.0f) {
    double cumulative = 0.0;
    for (int i = 0; i < keep; ++i) {
      cumulative += probs_[size_t(i)] / sum;
      if (cumulative >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    sum = 0.0;
    for (int i = 0; i < keep; ++i) sum += probs_[size_t(i)];
  }
  const double u = CounterUniform(p.seed, uint64_t(position)) * sum;
  double cumulative = 0.0;
  for (int i = 0; i < keep; ++i) {
    cumulative += probs_[size_t(i)];
    if (u < cumulative) return order_[size_t(i)];
  }
  return order_[size_t(keep - 1)];
}

}  // namespace mlaserve
