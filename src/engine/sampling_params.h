// A request's sampling parameters, with SGLang's names, meanings and validation rules
// (sglang/srt/sampling/sampling_params.py), plus the token-based finish test they imply.
//
// "Off" values: temperature 0 (greedy), top_p 1, top_k -1 or 0, min_p 0, repetition_penalty 1,
// frequency/presence_penalty 0, min_new_tokens 0, no stop strings or ids.
//
// Two C++ defaults differ from SGLang's JSON defaults on purpose, so that code building a
// SamplingParams{} in C++ (the CLI, tests) gets deterministic greedy decoding: temperature is 0
// here but 1.0 in SGLang's API (kApiDefaultTemperature), and seed is unset. The HTTP layer must
// apply kApiDefaultTemperature when a request omits "temperature".
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/types.h"

namespace mlaserve {

inline constexpr float kApiDefaultTemperature = 1.0f;  // SGLang's default for an omitted field
inline constexpr float kGreedyTemperature = 1e-6f;     // below this: greedy (SGLang's _SAMPLING_EPS)
inline constexpr int kMaxTopLogprobs = 20;             // as OpenAI's top_logprobs
inline constexpr int kMaxStopStrings = 16;
inline constexpr float kMaxLogitBias = 100.0f;         // OpenAI's range for logit_bias values

// OpenAI's logit_bias entry: `bias` is added to the token's logit before anything else
// (penalties, masks, temperature); -100 effectively bans the token, +100 forces it.
struct LogitBias {
  TokenId token;
  float bias;  // [-kMaxLogitBias, kMaxLogitBias]
};

struct SamplingParams {
  // The declaration order is part of the API (callers use designated initializers): append only.
  float temperature = 0.0f;          // [0, inf); < kGreedyTemperature: greedy
  float top_p = 1.0f;                // (0, 1]; 1: off
  int top_k = -1;                    // -1 or 0: off; 1: greedy; k: the k most likely tokens
  float min_p = 0.0f;                // [0, 1]; drop tokens with p < min_p * p_max; 0: off
  float repetition_penalty = 1.0f;   // (0, 2]; 1: off. Seen tokens: logit > 0 ? l / r : l * r
  float frequency_penalty = 0.0f;    // [-2, 2]; logit -= f * count in the output so far
  float presence_penalty = 0.0f;     // [-2, 2]; logit -= p if the token is in the output so far
  int max_new_tokens = 128;          // >= 0 (SGLang's default 128)
  int min_new_tokens = 0;            // [0, max_new_tokens]; EOS and stop_token_ids masked before
  std::vector<std::string> stop;     // stop strings: non-empty, at most kMaxStopStrings
  std::vector<TokenId> stop_token_ids;  // each in [0, vocab)
  bool ignore_eos = false;           // EOS and stop_token_ids do not finish the request
  bool skip_special_tokens = true;   // detokenization option, carried for the request
  bool no_stop_trim = false;         // keep a matched stop string in the output text
  std::optional<uint64_t> seed;      // unset: the engine derives one from the request
  bool return_logprob = false;       // report the chosen token's logprob
  int top_logprobs_num = 0;          // [0, kMaxTopLogprobs]; with return_logprob, the top-N too
  std::vector<LogitBias> logit_bias;  // each token in [0, vocab); biases of a repeated token add up
};

// Checks `params` against SGLang's rules; the error names the field and the value, e.g.
// "top_p must be in (0, 1], got 0". vocab_size bounds stop_token_ids. NaN fails every range.
// repetition_penalty follows SGLang's (0, 2] (1 = off; >1 discourages repeats, <1 favours them).
Status Validate(const SamplingParams& params, int vocab_size);

// Whether the draw is an argmax: temperature below kGreedyTemperature, or top_k == 1
// (SGLang turns temperature ~0 into top_k = 1).
bool IsGreedy(const SamplingParams& params);

// The seed a request draws with: its own if given, else `request_seed` (e.g. a hash of the
// request id, so that concurrent unseeded requests do not draw identical streams).
uint64_t ResolveSeed(const SamplingParams& params, uint64_t request_seed);

// SGLang's token-based finish: unless ignore_eos, `token` ends the request when it is one of
// stop_token_ids or one of the model's eos_token_ids. (Length and stop strings are checked
// elsewhere: max_new_tokens by the caller, stop strings by StopMatcher.)
bool IsStopToken(const SamplingParams& params, std::span<const TokenId> eos_token_ids, TokenId token);

}  // namespace mlaserve
