// Picks the next token from a row of logits. With a seed, the draw for a position depends only
// on (seed, position): a counter-based generator, so a request's tokens never depend on what
// else ran before or beside it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/types.h"

namespace mlaserve {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;
  int top_k = 0;  // 0: all
  uint64_t seed = 0;
};

// A uniform double in [0, 1) from (seed, position): SplitMix64 over a combined key.
double CounterUniform(uint64_t seed, uint64_t position);

class Sampler {
 public:
  explicit Sampler(int vocab_size);  // allocates its scratch once

  // logits: [vocab]. Not modified.
  TokenId Sample(std::span<const float> logits, const SamplingParams& params, int64_t position);

 private:
  std::vector<float> probs_;       // [vocab]
  std::vector<int32_t> order_;     // [vocab]
};

TokenId ArgMax(std::span<const float> logits);

}  // namespace mlaserve
