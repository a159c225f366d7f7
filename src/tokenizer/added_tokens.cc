// Trie-based leftmost-longest matching of added tokens.
#include "tokenizer/added_tokens.h"

#include <algorithm>

namespace mlaserve {
namespace {

// lstrip/rstrip swallow ASCII whitespace (Hugging Face uses Unicode White_Space; the added
// tokens of the supported models only ever sit next to ASCII spaces and newlines).
bool IsStripSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// single_word boundaries: ASCII letters, digits and '_' are word characters, and so is any
// non-ASCII byte (most non-ASCII characters in running text are letters).
bool IsWordByte(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return byte >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
         (c >= 'A' && c <= 'Z') || c == '_';
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  nodes_.emplace_back();  // the root
  for (size_t index = 0; index < tokens_.size(); ++index) {
    const std::string& content = tokens_[index].content;
    if (content.empty()) continue;
    can_start_[static_cast<unsigned char>(content[0])] = true;
    int32_t node = 0;
    for (char c : content) {
      const auto byte = static_cast<uint8_t>(c);
      int32_t child = Child(node, byte);
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        auto& children = nodes_[node].children;
        children.insert(std::lower_bound(children.begin(), children.end(),
                                         std::pair<uint8_t, int32_t>(byte, -1)),
                        {byte, child});
        nodes_.emplace_back();  // after the insert: emplace_back may reallocate nodes_
      }
      node = child;
    }
    // With duplicate contents the first listed token wins.
    if (nodes_[node].token_index < 0) nodes_[node].token_index = static_cast<int32_t>(index);
  }
}

int32_t AddedTokenMatcher::Child(int32_t node, uint8_t byte) const {
  const auto& children = nodes_[node].children;
  auto it =
      std::lower_bound(children.begin(), children.end(), std::pair<uint8_t, int32_t>(byte, -1));
  return (it != children.end() && it->first == byte) ? it->second : -1;
}

int32_t AddedTokenMatcher::LongestMatchAt(std::string_view text, size_t pos) const {
  int32_t node = 0;
  int32_t longest = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    node = Child(node, static_cast<uint8_t>(text[i]));
    if (node < 0) break;
    if (nodes_[node].token_index >= 0) longest = nodes_[node].token_index;
  }
  return longest;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<TextSegment>* segments) const {
  segments->clear();
  size_t text_start = 0;  // where the pending plain-text segment begins
  size_t pos = 0;
  while (pos < text.size()) {
    if (!can_start_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const int32_t index = LongestMatchAt(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t begin = pos;
    size_t end = pos + token.content.size();
    if (token.single_word) {
      const bool word_before = begin > 0 && IsWordByte(text[begin - 1]);
      const bool word_after = end < text.size() && IsWordByte(text[end]);
      if (word_before || word_after) {
        ++pos;
        continue;
      }
    }
    if (token.lstrip) {
      while (begin > text_start && IsStripSpace(text[begin - 1])) --begin;
    }
    if (token.rstrip) {
      while (end < text.size() && IsStripSpace(text[end])) ++end;
    }
    if (begin > text_start) segments->push_back({text_start, begin, -1});
    segments->push_back({begin, end, token.id});
    text_start = pos = end;
  }
  if (text_start < text.size()) segments->push_back({text_start, text.size(), -1});
}

}  // namespace mlaserve
