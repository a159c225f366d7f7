// Everything a loaded tokenizer consists of, and the loaders that build one from files.
// Internal to src/tokenizer: callers use Tokenizer (tokenizer.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/types.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/long_text_cuts.h"
#include "tokenizer/pretokenizer.h"

namespace mlaserve {

struct TokenizerModel {
  // Per token id, [vocab_size]. Ids no file defines have empty entries and decode to nothing.
  std::vector<std::string> spellings;  // as in the vocabulary file ("Ġthe"); added: content
  std::vector<std::string> bytes;      // what Decode emits for the id
  std::vector<uint8_t> is_special;     // 1 for special added tokens
  TokenIdByBytes id_by_spelling;       // spelling -> id, added tokens included

  BpeModel bpe;
  PreTokenizer pre_tokenizer;
  AddedTokenMatcher added_tokens;

  std::optional<TokenId> bos_id;
  std::optional<TokenId> eos_id;
  bool add_bos = false;
  // Kimi's cuts of long text between added tokens, before the pattern (long_text_cuts.h);
  // none for Hugging Face tokenizers.
  LongTextCuts long_text_cuts;

  size_t vocab_size() const { return spellings.size(); }
  // Grows the per-id tables as needed and records one token.
  void SetToken(TokenId id, std::string spelling, std::string raw_bytes);
  // Registers the added tokens: their spellings, bytes and special flags, and the matcher.
  void SetAddedTokens(std::vector<AddedToken> tokens);
};

// Hugging Face tokenizer.json. `source` names the file in error messages.
Result<std::unique_ptr<TokenizerModel>> ParseHfTokenizerJson(std::string_view json_text,
                                                             const std::string& source);

// tiktoken's "base64-bytes rank" file with Kimi-K2's pattern and special-token layout (256
// reserved ids after the ranks, named by the config's added_tokens_decoder).
Result<std::unique_ptr<TokenizerModel>> ParseKimiTiktoken(std::string_view model_text,
                                                          const std::string& model_source,
                                                          std::string_view config_text,
                                                          const std::string& config_source);

// tokenizer_config.json: bos_token / eos_token (a string or {"content": ...}) and
// add_bos_token. Without add_bos_token, BOS is added when there is a BOS token and
// `add_bos_by_default` (true for Hugging Face tokenizers; false for Kimi's tiktoken tokenizer
// class, which never adds one).
Status ApplyTokenizerConfig(std::string_view json_text, const std::string& source,
                            bool add_bos_by_default, TokenizerModel* model);

}  // namespace mlaserve
