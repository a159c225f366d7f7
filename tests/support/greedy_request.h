// The engine request most tests submit: greedy, exactly max_new tokens (EOS ignored).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/engine_types.h"

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

}  // namespace mlaserve::testing
