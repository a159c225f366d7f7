// Added tokens (special ones like "<｜begin▁of▁sentence｜>" and plain user-defined ones):
// found in the raw text before pre-tokenization, leftmost first and longest first at a given
// position, and mapped straight to their ids, as Hugging Face's AddedVocabulary does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/types.h"

namespace mlaserve {

struct AddedToken {
  std::string content;  // the literal text to find
  TokenId id = 0;
  bool special = false;      // skipped by Decode(..., skip_special_tokens=true)
  bool lstrip = false;       // the match also swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // match only when not inside a word
};

// One stretch of input: either plain text to pre-tokenize or an added token.
struct TextSegment {
  size_t begin = 0;  // byte offsets into the input
  size_t end = 0;
  TokenId added_token = -1;  // -1 for plain text
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  // Replaces *segments with the segments of `text`, in order, covering it except for the
  // whitespace that lstrip/rstrip tokens swallow. Empty text segments are omitted.
  void Split(std::string_view text, std::vector<TextSegment>* segments) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie over token contents; children are kept sorted by byte.
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;
    int32_t token_index = -1;  // into tokens_, when a token ends here
  };
  int32_t Child(int32_t node, uint8_t byte) const;
  // The longest token matching at text[pos], or -1.
  int32_t LongestMatchAt(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  bool can_start_[256] = {};  // first bytes of any token: lets Split skip most positions
};

}  // namespace mlaserve
