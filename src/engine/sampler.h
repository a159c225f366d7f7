// Picks the next token from a row of logits, SGLang's way (docs/architecture.md, "Sampling"):
//   0. logit_bias (OpenAI's) is added to the logits;
//   1. penalties over the request's own output tokens: frequency and presence (additive), then
//      repetition (scaling);
//   2. while fewer than min_new_tokens have been generated, EOS and stop_token_ids get -inf;
//   3. greedy (temperature ~0 or top_k 1): argmax, lowest id on ties; otherwise
//   4. temperature, then top_k, top_p (over the top-k renormalised mass), min_p, and one draw
//      with a counter-based generator keyed by (seed, position).
// Determinism: a token depends only on (logits, params, the request's output history, seed,
// position), never on what else the Sampler was used for, in what order, or on which thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/types.h"
#include "engine/logprobs.h"
#include "engine/sampling_params.h"

namespace mlaserve {

// A uniform double in [0, 1) from (seed, position): SplitMix64 over a combined key.
double CounterUniform(uint64_t seed, uint64_t position);

// A request's output tokens as counts, for the penalties and min_new_tokens. Owned by the
// request (it survives retraction: recomputing a request does not change its output so far);
// Sample() only reads it. Sparse: one entry per distinct token in first-seen order, found
// through an open-addressing index. Both are sized up front from the expected number of output
// tokens, so Add() does not allocate until that many distinct tokens have been seen; past it
// they grow geometrically (amortised O(1) per token).
class PenaltyState {
 public:
  struct Entry {
    TokenId token;
    int32_t count;  // >= 1
  };

  explicit PenaltyState(int expected_output_tokens = 0);

  void Add(TokenId token);  // records one output token; token >= 0

  int64_t num_output_tokens() const { return num_output_tokens_; }
  std::span<const Entry> entries() const { return entries_; }
  int32_t CountOf(TokenId token) const;  // 0 when never generated

 private:
  void Rehash(size_t num_slots);
  size_t SlotOf(TokenId token) const;  // the slot holding `token`, or the empty one it would take

  std::vector<Entry> entries_;
  std::vector<int32_t> slots_;  // [power of two] index into entries_, -1 empty; load <= 1/2
  int64_t num_output_tokens_ = 0;
};

// What one draw needs from its request besides the parameters.
struct SampleContext {
  int64_t position = 0;                        // the new token's position; keys the generator
  uint64_t seed = 0;                           // ResolveSeed(params, request's seed)
  const PenaltyState* output_history = nullptr;  // the request's output so far; null: none
  std::span<const TokenId> eos_token_ids = {};   // masked with stop_token_ids below min_new_tokens
};

// Not thread-safe (it owns scratch): one Sampler per thread, shared by any number of requests.
class Sampler {
 public:
  explicit Sampler(int vocab_size);  // allocates its scratch once

  // logits: [n <= vocab_size], not modified. With `logprob` (pass it when params.return_logprob),
  // also reports the chosen token's logprob and params.top_logprobs_num alternatives (see
  // logprobs.h for which distribution). The caller then adds the token to its PenaltyState.
  // If every token ends up masked, falls back to the argmax of the unprocessed logits (and
  // reports logprobs of those).
  TokenId Sample(std::span<const float> logits, const SamplingParams& params, const SampleContext& context,
                 LogprobResult* logprob = nullptr);

  // The short form: no output history, no EOS ids, seed = params.seed or 0.
  TokenId Sample(std::span<const float> logits, const SamplingParams& params, int64_t position);

 private:
  // Applies steps 0-2 into adjusted_ when they change anything; returns the logits to use.
  std::span<const float> Adjust(std::span<const float> logits, const SamplingParams& params,
                                const SampleContext& context);
  // Step 4: logits are the adjusted ones, max_logit their (finite) maximum.
  TokenId Draw(std::span<const float> logits, float max_logit, const SamplingParams& params,
               const SampleContext& context);

  std::vector<float> adjusted_;  // [vocab] logits after penalties and masks
  std::vector<float> probs_;     // [vocab] exp((logit - max) / T), by token id
  std::vector<int32_t> order_;   // [vocab] candidate token ids
};

// The first index of the largest logit.
TokenId ArgMax(std::span<const float> logits);

}  // namespace mlaserve
