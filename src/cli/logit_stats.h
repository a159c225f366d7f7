// Teacher-forced comparisons of logits shared by the quality reports (kv-eval, weights-eval).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/percentile.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"

namespace mlaserve::cli {

// log-softmax of one row of `vocab` logits into out[vocab].
inline void LogSoftmax(const float* logits, int vocab, std::vector<double>& out) {
  const float max = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - max);
  const double log_sum = std::log(sum) + max;
  for (int i = 0; i < vocab; ++i) out[size_t(i)] = double(logits[i]) - log_sum;
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

  // The figures the reports print.
  double Perplexity() const { return std::exp(nll_sum / double(std::max<int64_t>(1, scored))); }
  double MeanKl() const {
    double sum = 0.0;
    for (double k : kl) sum += k;
    return sum / double(std::max<size_t>(1, kl.size()));
  }
  double P99Kl() const { return Percentile(kl, 99); }
  double Top1() const { return double(top1_agree) / double(std::max<int64_t>(1, scored)); }
};

// Teacher-forced window w: [bos] + ids[w * window, (w + 1) * window).
inline void TeacherForcedWindow(const std::vector<TokenId>& ids, std::optional<TokenId> bos, int window, int w,
                                std::vector<TokenId>& input) {
  input.clear();
  if (bos) input.push_back(*bos);
  input.insert(input.end(), ids.begin() + int64_t(w) * window, ids.begin() + int64_t(w + 1) * window);
}

// Runs `reference` over `input` from scratch, keeping every position's logits in
// ref_logits [input.size(), vocab] and adding its own negative log-likelihood of each next token
// to own.nll_sum / own.scored. lp is scratch of vocab entries.
inline Status RunReferenceWindow(SequenceRunner& reference, const std::vector<TokenId>& input, int vocab,
                                 std::vector<float>& ref_logits, LogitAgreement& own, std::vector<double>& lp) {
  auto keep = [&](int first, int count, const float* logits) {
    std::copy(logits, logits + size_t(count) * vocab, ref_logits.begin() + size_t(first) * vocab);
  };
  SequenceRunner::LogitsSink sink(keep);
  reference.Reset();
  MLA_RETURN_IF_ERROR(reference.Append(input, &sink));
  for (size_t i = 0; i + 1 < input.size(); ++i) {
    LogSoftmax(ref_logits.data() + i * size_t(vocab), vocab, lp);
    own.nll_sum -= lp[size_t(input[i + 1])];
    ++own.scored;
  }
  return Status::Ok();
}

// Runs `candidate` over the same `input` from scratch and adds, for every position that has a
// next token, its agreement with the reference's logits (from RunReferenceWindow) to
// `agreement`. ref_lp and cand_lp are scratch of vocab entries.
inline Status CompareWindow(SequenceRunner& candidate, const std::vector<TokenId>& input, int vocab,
                            const std::vector<float>& ref_logits, LogitAgreement& agreement,
                            std::vector<double>& ref_lp, std::vector<double>& cand_lp) {
  const int n = int(input.size());
  auto compare = [&](int first, int count, const float* logits) {
    for (int j = 0; j < count; ++j) {
      const int i = first + j;
      if (i + 1 >= n) continue;
      agreement.Add(ref_logits.data() + size_t(i) * vocab, logits + size_t(j) * vocab, vocab, input[size_t(i + 1)],
                    ref_lp, cand_lp);
    }
  };
  SequenceRunner::LogitsSink sink(compare);
  candidate.Reset();
  return candidate.Append(input, &sink);
}

}  // namespace mlaserve::cli
