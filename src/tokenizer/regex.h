// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) and the per-call
// match buffer. Internal to the tokenizer: pre-tokenizer patterns from tokenizer.json
// (Oniguruma syntax in Hugging Face) and tiktoken patterns both run on it.
#pragma once

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"

namespace mlaserve {

// Scratch for matching: one per Encode call (or per thread), never shared between threads.
class RegexMatchData {
 public:
  RegexMatchData();
  pcre2_match_data* get() const { return data_.get(); }

 private:
  struct Deleter {
    void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
  };
  std::unique_ptr<pcre2_match_data, Deleter> data_;
};

struct RegexMatch {
  size_t begin = 0;  // byte offsets into the searched text
  size_t end = 0;
};

// Immutable after Compile; Find may be called from many threads at once, each with its own
// RegexMatchData.
class Regex {
 public:
  enum class Syntax { kPattern, kLiteral };

  // Errors carry PCRE2's message and the offset in the pattern where it failed.
  static Result<Regex> Compile(std::string_view pattern, Syntax syntax = Syntax::kPattern);

  // Finds the leftmost match starting at or after byte `start`. `text` must be valid UTF-8 and
  // `start` a character boundary (not checked, for speed). Returns false when there is none.
  Result<bool> Find(std::string_view text, size_t start, const RegexMatchData& scratch,
                    RegexMatch* match) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Deleter {
    void operator()(pcre2_code* code) const { pcre2_code_free(code); }
  };
  Regex(std::unique_ptr<pcre2_code, Deleter> code, std::string pattern)
      : code_(std::move(code)), pattern_(std::move(pattern)) {}

  std::unique_ptr<pcre2_code, Deleter> code_;
  std::string pattern_;
};

// Calls on_match(const RegexMatch&) for every non-overlapping match left to right, the way
// Rust's and Oniguruma's find_iter do: after an empty match the search resumes one character
// later, so every call makes progress.
template <typename OnMatch>
Status ForEachMatch(const Regex& regex, std::string_view text, const RegexMatchData& scratch,
                    OnMatch&& on_match) {
  size_t start = 0;
  RegexMatch match;
  while (start <= text.size()) {
    Result<bool> found = regex.Find(text, start, scratch, &match);
    if (!found.ok()) return found.status();
    if (!found.value()) break;
    on_match(match);
    if (match.end > match.begin) {
      start = match.end;
      continue;
    }
    if (match.end == text.size()) break;
    // Step over one whole UTF-8 character after an empty match.
    start = match.end + 1;
    while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
  }
  return Status::Ok();
}

}  // namespace mlaserve
