// The engine request most tests submit: greedy, exactly max_new tokens (EOS ignored), and the
// pseudo-random prompts they give the bundled model.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/engine_types.h"
#include "engine/sampler.h"

namespace mlaserve::testing {

inline GenerateRequest Greedy(std::string rid, std::vector<TokenId> prompt, int max_new) {
  GenerateRequest r;
  r.rid = std::move(rid);
  r.input_ids = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.sampling.max_new_tokens = max_new;
  r.sampling.ignore_eos = true;
  return r;
}

// Token 0 then len - 1 ids in [1, 2001) drawn by CounterUniform(seed, position): inside the
// bundled model's vocabulary and below its special tokens.
inline std::vector<TokenId> RandomPrompt(int len, uint64_t seed) {
  std::vector<TokenId> p{0};
  for (int i = 1; i < len; ++i) p.push_back(TokenId(1 + CounterUniform(seed, uint64_t(i)) * 2000));
  return p;
}

}  // namespace mlaserve::testing
