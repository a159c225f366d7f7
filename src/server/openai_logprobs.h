// Token logprobs in OpenAI's two shapes: completions' parallel lists (tokens, token_logprobs,
// top_logprobs as {text: logprob}, text_offset in characters of the choice's text) and chat's
// list of entries ({token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}). Used for
// a whole choice and for each streamed chunk alike.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine_types.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {

class OpenAiLogprobs {
 public:
  // tokenizer must outlive this.
  OpenAiLogprobs(const Tokenizer& tokenizer, OpenAiEndpoint endpoint)
      : tokenizer_(tokenizer), chat_(endpoint == OpenAiEndpoint::kChat) {}

  // Logprobs of no token yet, in the endpoint's shape.
  nlohmann::json Empty() const;
  // Appends to `out` the logprobs of the output tokens in `o` (text_offset: characters of the
  // choice's text covered so far, advanced past each token).
  void AddOutput(const RequestOutput& o, nlohmann::json& out, int64_t& text_offset) const;
  // Appends the prompt tokens' logprobs in `o` (echo; the first token has none: null).
  void AddPrompt(const RequestOutput& o, nlohmann::json& out, int64_t& text_offset) const;

 private:
  void AddToken(TokenId t, std::optional<float> logprob, const std::vector<TokenLogprob>* top, nlohmann::json& out,
                int64_t& text_offset) const;

  const Tokenizer& tokenizer_;
  bool chat_;
};

}  // namespace mlaserve
