// What every generation endpoint (/v1/completions, /v1/chat/completions, /generate) does with a
// client's fields once they are read: prompts turned into token ids, the number of generations
// bounded, and one GenerateRequest built from the prompt, its SamplingParams (sampling_json.h)
// and the logprobs asked for. Each protocol module reads its own JSON shape; the engine's side
// of a request is built here, once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/types.h"
#include "engine/engine_types.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {

// Generations one request may ask for: n times the number of prompts, on every endpoint.
inline constexpr int kMaxGenerations = 128;

// The logprobs a request asks for, in SGLang's terms on every endpoint.
struct LogprobRequest {
  bool return_logprob = false;
  int top_logprobs_num = 0;   // alternatives per token (with return_logprob)
  int logprob_start_len = -1; // >= 0: the prompt's logprobs from this position too
};

// A prompt's text as token ids (with the tokenizer's BOS when it adds one). Errors name the
// field: "'prompt' is empty", "'text[1]': <the tokenizer's reason>".
Result<std::vector<TokenId>> EncodePromptText(const Tokenizer& tokenizer, const std::string& text,
                                              const std::string& name);

// A JSON list of token ids, each in [0, vocab_size): `not_ids_error` when an element is not an
// integer; an id outside the vocabulary is named as the client wrote it ("'input_ids' item
// 4294967297 is outside the vocabulary [0, 2048)"), never wrapped. An empty list is the
// caller's to refuse.
Result<std::vector<TokenId>> PromptIdsFromJson(const nlohmann::json& ids, int vocab_size, const std::string& name,
                                               const std::string& not_ids_error);

// n samples of a prompt, bringing the request's generations to `total`: within [1,
// kMaxGenerations] or "'n' times the number of prompts must be in [1, 128]".
Status CheckGenerations(int n, int64_t total);

// The engine's request for one prompt (the rid is given per sample, ApiServer::AppendSamples).
GenerateRequest BuildGenerateRequest(std::vector<TokenId> input_ids, SamplingParams sampling,
                                     const LogprobRequest& logprobs);

}  // namespace mlaserve
