// Reading sampling parameters from request JSON: SGLang's native `sampling_params` object and
// the OpenAI request fields (with SGLang's extensions). Wrong types and bad values are errors
// naming the field; validation of ranges is engine/sampling_params.h's Validate.
#pragma once

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/sampling_params.h"

namespace mlaserve {

// SGLang's sampling_params: temperature, top_p, top_k, min_p, repetition_penalty,
// frequency_penalty, presence_penalty, max_new_tokens, min_new_tokens, stop, stop_token_ids,
// ignore_eos, skip_special_tokens, no_stop_trim, seed (sampling_seed), logit_bias. `n` is allowed
// here and read by the caller. Any other key is an error naming it (constrained decoding's
// regex / json_schema / ebnf are refused as not implemented). A logit_bias key must spell a
// token id in [0, vocab_size) ("'logit_bias' key '4294967296' is not a token id in [0, 129280)").
Result<SamplingParams> SamplingFromNative(const nlohmann::json& sampling_params, int vocab_size);

// OpenAI completions / chat fields: max_tokens (max_completion_tokens), temperature, top_p,
// stop, seed, presence_penalty, frequency_penalty, logit_bias, plus SGLang's top_k, min_p,
// repetition_penalty, min_tokens, ignore_eos, stop_token_ids, skip_special_tokens, no_stop_trim.
// default_max_tokens applies when the request gives none. Which fields a request may carry at
// all is the handler's check (CheckFields); `n` is read there too. logit_bias as above.
Result<SamplingParams> SamplingFromOpenAi(const nlohmann::json& request, int default_max_tokens, int vocab_size);

}  // namespace mlaserve
