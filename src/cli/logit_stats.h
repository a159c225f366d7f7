// Small statistics over logits shared by the quality reports (kv-eval, weights-eval).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampler.h"

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

// Teacher-forced agreement of a candidate's logits with a reference's, row by row.
struct LogitAgreement {
  double nll_sum = 0.0;    // candidate's negative log-likelihood of the actual next tokens
  std::vector<double> kl;  // per scored token, KL(reference || candidate)
  int64_t top1_agree = 0;
  int64_t scored = 0;

  // One position: reference and candidate rows of `vocab` logits; `next` is the actual next
  // token. ref_lp / cand_lp are scratch of vocab entries.
  void Add(const float* ref_row, const float* row, int vocab, int next, std::vector<double>& ref_lp,
           std::vector<double>& cand_lp) {
    LogSoftmax(ref_row, vocab, ref_lp);
    LogSoftmax(row, vocab, cand_lp);
    double divergence = 0.0;
    for (int v = 0; v < vocab; ++v) {
      divergence += std::exp(ref_lp[size_t(v)]) * (ref_lp[size_t(v)] - cand_lp[size_t(v)]);
    }
    kl.push_back(std::max(0.0, divergence));
    nll_sum -= cand_lp[size_t(next)];
    top1_agree += ArgMax(std::span(ref_row, size_t(vocab))) == ArgMax(std::span(row, size_t(vocab)));
    ++scored;
  }
};

}  // namespace mlaserve::cli
