// Pre-tokenization: cutting raw text into the pieces ("words") that BPE then encodes one by
// one, with the semantics of Hugging Face's Split / ByteLevel / Digits / Sequence
// pre-tokenizers. Pieces are raw UTF-8 bytes; the byte-level character mapping is not applied
// here (BPE works on bytes, see bpe.h).
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace mlaserve {

// What Split does with the pieces the pattern matches ("delimiters") and the text between them.
enum class SplitBehavior {
  kRemoved,             // drop delimiters
  kIsolated,            // every delimiter becomes its own piece
  kMergedWithPrevious,  // a delimiter joins the piece before it
  kMergedWithNext,      // a delimiter joins the piece after it
  kContiguous,          // adjacent delimiters become one piece
};

struct SplitStep {
  Regex pattern;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;  // the pattern matches the pieces to keep, not the delimiters
};

struct ByteLevelStep {
  bool add_prefix_space = false;  // prepend " " to every piece that does not start with one
  bool use_regex = true;          // split further with the GPT-2 pattern
};

using PreTokenizerStep = std::variant<SplitStep, ByteLevelStep>;

// Per-call working memory; reuse it across Split calls of one Encode to avoid reallocation.
struct PreTokenizeScratch {
  RegexMatchData match_data;
  std::deque<std::string> owned_pieces;  // text the pipeline had to create (prefix spaces)
  std::vector<std::string_view> next_pieces;
  struct Span {
    size_t begin;
    size_t end;
    bool is_delimiter;
  };
  std::vector<Span> spans;
};

// Kimi-K2's split pattern (tokenization_kimi.py's pat_str; also GGUF's "kimi-k2" pre-tokenizer).
// Its pat_str is written for tiktoken (Rust regex syntax), translated for PCRE2 in two ways:
//  - the class intersection [A&&[^\p{Han}]], which PCRE2 lacks, becomes (?:(?!Han)[A]);
//  - \p{Han} becomes \p{sc:Han}: in Rust a bare script name is the Script property, while
//    PCRE2 >= 10.40 reads it as Script_Extensions, which also covers CJK punctuation shared
//    with kana (such as "、") and would change how those characters split.
inline constexpr std::string_view kKimiK2Pattern =
    R"([\p{sc:Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{sc:Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*)"
    R"((?:(?!\p{sc:Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{sc:Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+)"
    R"((?:(?!\p{sc:Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

class PreTokenizer {
 public:
  // No steps: the whole text is one piece.
  PreTokenizer() = default;
  // `gpt2_pattern` is needed (non-null) only when some step is a ByteLevelStep with use_regex.
  PreTokenizer(std::vector<PreTokenizerStep> steps, std::unique_ptr<Regex> gpt2_pattern)
      : steps_(std::move(steps)), gpt2_pattern_(std::move(gpt2_pattern)) {}

  // Compiles GPT-2's pattern (what ByteLevel with use_regex=true splits on).
  static Result<std::unique_ptr<Regex>> CompileGpt2Pattern();

  bool has_byte_level_step() const;

  // Replaces *pieces with the pieces of `text`, in order. The views point into `text` or into
  // scratch->owned_pieces and stay valid until the scratch is next used or destroyed.
  Status Split(std::string_view text, PreTokenizeScratch* scratch,
               std::vector<std::string_view>* pieces) const;

 private:
  std::vector<PreTokenizerStep> steps_;
  std::unique_ptr<Regex> gpt2_pattern_;
};

}  // namespace mlaserve
