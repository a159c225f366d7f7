// Log-probabilities reported to clients: the chosen token's and the top-N alternatives', from one
// row of logits under log_softmax(logits / temperature).
//
// Which logits (SGLang's defaults, which we follow):
// - Output tokens: the logits the draw used, after penalties and the min_new_tokens mask and
//   divided by the temperature, before top-k/top-p/min-p truncation (SGLang's sampler returns
//   log(softmax(logits / T)) unless SGLANG_RETURN_ORIGINAL_LOGPROB is set). Greedy uses T = 1.
//   Sampler::Sample fills these.
// - Prompt (input) tokens: the model's raw logits, T = 1 (SGLang's temp_scaled_logprobs is off
//   by default). Row i of a prompt's logits predicts token i + 1: call ComputeLogprobs per
//   row.
// Masked tokens (logit -inf) have logprob -inf.
#pragma once

#include <span>
#include <vector>

#include "core/types.h"

namespace mlaserve {

struct TokenLogprob {
  TokenId token = 0;
  float logprob = 0.0f;
};

struct LogprobResult {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // [min(top_n, vocab)], most likely first, ties by lower id
};

// log(sum_i exp(logits[i] / temperature)), in double; -inf entries add nothing, NaN entries
// are skipped. -inf when every entry is -inf. temperature > 0.
double LogSumExp(std::span<const float> logits, float temperature = 1.0f);

// Fills `out` for `token` (in [0, logits.size())) and the top_n most likely tokens. Reuses
// out.top's storage, so a caller that keeps one LogprobResult allocates only while it grows.
// O(vocab * top_n) worst case, O(vocab) typical.
void ComputeLogprobs(std::span<const float> logits, float temperature, TokenId token, int top_n,
                     LogprobResult& out);

}  // namespace mlaserve
