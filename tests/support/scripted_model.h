// A model whose replies a test writes: zero weights (every logit is exactly 0, whatever the
// context), the bundled tokenizer plus one added token per piece of text the test needs, and a
// chat template. A reply is forced through the public API alone: each piece gets a logit_bias
// slightly below the one before (100, 99.9, ...) and a presence_penalty of 2 drops every piece
// once used, so greedy decoding emits the pieces in order, each exactly once. The last piece of
// a script is normally the EOS token (finish_reason "stop").
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/types.h"
#include "support/run_binary.h"

namespace mlaserve::testing {

struct ScriptedToken {
  std::string text;
  bool special = false;  // skipped when a request decodes with skip_special_tokens
};

class ScriptedModel {
 public:
  // Writes the model into a fresh TempDir (init-random --init-std 0); fails the test on error.
  ScriptedModel(const std::vector<ScriptedToken>& tokens, const std::string& chat_template);

  const std::string& path() const { return dir_.path(); }
  TokenId id(const std::string& text) const;  // a scripted token's id (fails the test if unknown)
  TokenId eos() const { return 2043; }         // the bundled tokenizer's <|eos|>

  // The request fields that make the reply exactly `pieces` (token texts, or "<|eos|>").
  nlohmann::json Force(const std::vector<std::string>& pieces) const;
  // Rewrites model.safetensors so that after the token `after` (a scripted piece or the
  // bundled vocabulary's spelling, e.g. "Ċ" for a newline) come `pieces`, in order, with any
  // sampling at temperature 0. Each token may appear once in after + pieces.
  void Chain(const std::string& after, const std::vector<std::string>& pieces);

 private:
  TempDir dir_;
  std::map<std::string, TokenId> ids_;
};

}  // namespace mlaserve::testing
