// Kimi's cuts of long text before its pattern runs (tokenization_kimi.py, `encode`): the text is
// first cut every TIKTOKEN_MAX_ENCODE_CHARS (400,000) characters, then each of those chunks
// wherever a run of whitespace or of non-whitespace characters (Python's str.isspace) grows past
// MAX_NO_WHITESPACES_CHARS (25,000); every part is tokenized on its own, so a token never spans
// a cut. Characters are code points, as Python's str counts them, not bytes.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace mlaserve {

struct LongTextCuts {
  size_t chunk_chars = 0;  // first, a cut every this many characters; 0: none
  size_t run_chars = 0;    // then, within a chunk, a cut inside any longer run; 0: none
};

// tokenization_kimi.py's TIKTOKEN_MAX_ENCODE_CHARS and MAX_NO_WHITESPACES_CHARS.
inline constexpr LongTextCuts kKimiLongTextCuts{.chunk_chars = 400'000, .run_chars = 25'000};

// Replaces `out` with views into `text` (valid UTF-8) whose concatenation is `text`: `text`
// whole when no cut applies. The run count starts afresh at each chunk, as the reference splits
// each chunk separately. `out`'s storage is reused.
void CutLongText(std::string_view text, const LongTextCuts& cuts, std::vector<std::string_view>* out);

}  // namespace mlaserve
