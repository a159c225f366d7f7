#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace mlaserve {

double LogSumExp(std::span<const float> logits, float temperature) {
  const double inv_t = 1.0 / double(temperature);
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float v : logits) {
    if (v > max_logit) max_logit = v;  // NaN never compares greater
  }
  if (max_logit == -std::numeric_limits<float>::infinity()) return max_logit;
  // exp in float (the terms are in (0, 1]; float keeps the vocabulary pass fast), sum in double.
  const float inv_t_f = float(inv_t);
  double sum = 0.0;
  for (float v : logits) {
    if (v > -std::numeric_limits<float>::infinity()) sum += std::exp((v - max_logit) * inv_t_f);
  }
  return double(max_logit) * inv_t + std::log(sum);
}

void ComputeLogprobs(std::span<const float> logits, float temperature, TokenId token, int top_n,
                     LogprobResult& out) {
  MLA_CHECK(token >= 0 && size_t(token) < logits.size() && temperature > 0.0f);
  const double inv_t = 1.0 / double(temperature);
  const double log_z = LogSumExp(logits, temperature);
  auto logprob_of = [&](TokenId id) { return float(double(logits[size_t(id)]) * inv_t - log_z); };
  out.chosen = {token, logprob_of(token)};

  // Top-N by logit (dividing by a positive temperature keeps the order): a sorted window of at
  // most n entries, insertion from the back, so a typical token costs one comparison.
  const size_t n = std::min(size_t(std::max(top_n, 0)), logits.size());
  out.top.clear();
  if (n == 0) return;
  auto better = [&](TokenId a, TokenId b) {
    const float la = logits[size_t(a)], lb = logits[size_t(b)];
    return la > lb || (la == lb && a < b);
  };
  for (size_t i = 0; i < logits.size(); ++i) {
    const TokenId id = TokenId(i);
    if (std::isnan(logits[i])) continue;
    if (out.top.size() == n && !better(id, out.top.back().token)) continue;
    if (out.top.size() < n) out.top.push_back({id, 0.0f});
    size_t pos = out.top.size() - 1;
    while (pos > 0 && better(id, out.top[pos - 1].token)) {
      out.top[pos] = out.top[pos - 1];
      --pos;
    }
    out.top[pos] = {id, 0.0f};
  }
  for (TokenLogprob& entry : out.top) entry.logprob = logprob_of(entry.token);
}

}  // namespace mlaserve
