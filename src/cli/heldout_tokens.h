// The held-out text the quality reports (kv-eval, weights-eval) score: --data, else the model
// directory's heldout.txt, tokenized without BOS. Errors name the file and the flag to use.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "core/types.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve::cli {

struct HeldoutTokens {
  std::string path;  // the file read
  std::vector<TokenId> ids;
};

// At least min_tokens tokens, else an error ("...: fewer tokens than --window").
Result<HeldoutTokens> ReadHeldoutTokens(const std::string& model_path, const std::string& data_arg,
                                        const Tokenizer& tokenizer, int min_tokens);

}  // namespace mlaserve::cli
