// Each step re-splits every current piece, as Hugging Face's PreTokenizedString::split does;
// empty pieces are dropped after every step.
#include "tokenizer/pretokenizer.h"

#include <utility>

namespace mlaserve {
namespace {

// GPT-2's pattern, as Hugging Face's ByteLevel pre-tokenizer spells it.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

using Span = PreTokenizeScratch::Span;

// Merges spans in place per `behavior`; returns the [first, last) range of spans to keep.
std::pair<size_t, size_t> ApplyBehavior(SplitBehavior behavior, std::vector<Span>& spans) {
  const size_t count = spans.size();
  bool previous_was_delimiter = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
    case SplitBehavior::kIsolated: return {0, count};
    case SplitBehavior::kMergedWithPrevious: {
      size_t write = 0;
      for (size_t read = 0; read < count; ++read) {
        const Span span = spans[read];
        if (span.is_delimiter && !previous_was_delimiter && write > 0) {
          spans[write - 1].end = span.end;
        } else {
          spans[write++] = span;
        }
        previous_was_delimiter = span.is_delimiter;
      }
      return {0, write};
    }
    case SplitBehavior::kMergedWithNext: {
      // Mirror image of kMergedWithPrevious: walk right to left, compacting toward the end.
      size_t write = count;
      for (size_t read = count; read-- > 0;) {
        const Span span = spans[read];
        if (span.is_delimiter && !previous_was_delimiter && write < count) {
          spans[write].begin = span.begin;
        } else {
          spans[--write] = span;
        }
        previous_was_delimiter = span.is_delimiter;
      }
      return {write, count};
    }
    case SplitBehavior::kContiguous: {
      size_t write = 0;
      for (size_t read = 0; read < count; ++read) {
        const Span span = spans[read];
        if (span.is_delimiter == previous_was_delimiter && write > 0) {
          spans[write - 1].end = span.end;
        } else {
          spans[write++] = span;
        }
        previous_was_delimiter = span.is_delimiter;
      }
      return {0, write};
    }
  }
  return {0, count};
}

// Re-splits every piece in *pieces with `pattern`.
Status ApplySplit(const Regex& pattern, SplitBehavior behavior, bool invert,
                  PreTokenizeScratch* scratch, std::vector<std::string_view>* pieces) {
  std::vector<std::string_view>& out = scratch->next_pieces;
  out.clear();
  std::vector<Span>& spans = scratch->spans;
  for (std::string_view piece : *pieces) {
    // Cover the piece with alternating text / delimiter spans.
    spans.clear();
    size_t covered = 0;
    MLA_RETURN_IF_ERROR(
        ForEachMatch(pattern, piece, scratch->match_data, [&](const RegexMatch& match) {
          if (match.begin > covered) spans.push_back({covered, match.begin, false});
          spans.push_back({match.begin, match.end, true});
          covered = match.end;
        }));
    if (covered < piece.size()) spans.push_back({covered, piece.size(), false});
    if (invert) {
      for (Span& span : spans) span.is_delimiter = !span.is_delimiter;
    }

    const auto [first, last] = ApplyBehavior(behavior, spans);
    for (size_t i = first; i < last; ++i) {
      const Span& span = spans[i];
      if (span.end == span.begin) continue;
      if (behavior == SplitBehavior::kRemoved && span.is_delimiter) continue;
      out.push_back(piece.substr(span.begin, span.end - span.begin));
    }
  }
  pieces->swap(out);
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Regex>> PreTokenizer::CompileGpt2Pattern() {
  Result<Regex> compiled = Regex::Compile(kGpt2Pattern);
  if (!compiled.ok()) return compiled.status();
  return std::make_unique<Regex>(std::move(compiled).value());
}

bool PreTokenizer::has_byte_level_step() const {
  for (const PreTokenizerStep& step : steps_) {
    if (std::holds_alternative<ByteLevelStep>(step)) return true;
  }
  return false;
}

Status PreTokenizer::Split(std::string_view text, PreTokenizeScratch* scratch,
                           std::vector<std::string_view>* pieces) const {
  pieces->clear();
  scratch->owned_pieces.clear();
  if (text.empty()) return Status::Ok();
  pieces->push_back(text);

  for (const PreTokenizerStep& step : steps_) {
    if (const auto* split = std::get_if<SplitStep>(&step)) {
      MLA_RETURN_IF_ERROR(
          ApplySplit(split->pattern, split->behavior, split->invert, scratch, pieces));
      continue;
    }
    const auto& byte_level = std::get<ByteLevelStep>(step);
    if (byte_level.add_prefix_space) {
      for (std::string_view& piece : *pieces) {
        if (piece.front() == ' ') continue;
        std::string& owned = scratch->owned_pieces.emplace_back();
        owned.reserve(piece.size() + 1);
        owned.push_back(' ');
        owned.append(piece);
        piece = owned;
      }
    }
    if (byte_level.use_regex) {
      MLA_RETURN_IF_ERROR(
          ApplySplit(*gpt2_pattern_, SplitBehavior::kIsolated, false, scratch, pieces));
    }
  }
  return Status::Ok();
}

}  // namespace mlaserve
