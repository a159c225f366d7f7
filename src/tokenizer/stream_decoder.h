// Incremental detokenization for streaming responses: one token in, the text that is now
// final out. A byte-level token can end in the middle of a UTF-8 character (CJK, emoji); those
// bytes are held back until a later token completes the character.
//
// Contract: the concatenation of every Push() result followed by Flush() equals
// Tokenizer::Decode() of the same ids (with the same skip_special_tokens), always: ill-formed
// bytes become U+FFFD by the same rule in both. Work per token is O(token bytes).
#pragma once

#include <string>

#include "core/types.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {

class StreamDecoder {
 public:
  // Borrows `tokenizer`, which must outlive this decoder (and not be moved while it lives).
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // Returns the complete characters available after `id` (possibly empty).
  std::string Push(TokenId id);

  // Returns whatever is held back, an incomplete tail becoming U+FFFD, and resets the decoder
  // so it can start a new sequence.
  std::string Flush();

  // Bytes held back waiting for the rest of a character (0..3 of them).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // a well-formed but incomplete UTF-8 prefix
};

}  // namespace mlaserve
