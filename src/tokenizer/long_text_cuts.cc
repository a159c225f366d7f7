// CutLongText: one pass over the code points, counting the chunk and the current run.
#include "tokenizer/long_text_cuts.h"

#include "tokenizer/utf8.h"

namespace mlaserve {
namespace {

// Python's str.isspace() for one code point (the characters Kimi's splitter counts as space).
bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// No cut can apply when the text has no more bytes (so no more characters) than every limit.
bool FitsEveryLimit(size_t num_bytes, const LongTextCuts& cuts) {
  return (cuts.chunk_chars == 0 || num_bytes <= cuts.chunk_chars) &&
         (cuts.run_chars == 0 || num_bytes <= cuts.run_chars);
}

}  // namespace

void CutLongText(std::string_view text, const LongTextCuts& cuts, std::vector<std::string_view>* out) {
  std::vector<std::string_view>& parts = *out;
  parts.clear();
  if (FitsEveryLimit(text.size(), cuts)) {
    parts.push_back(text);
    return;
  }
  size_t part_begin = 0;
  size_t chunk_chars = 0;  // characters of the current chunk before `at`
  size_t run_chars = 0;    // length of the current run, `at`'s character included once counted
  bool run_is_space = false;
  for (size_t at = 0; at < text.size();) {
    const Utf8Step step = ScanUtf8(text.substr(at));  // valid UTF-8 here (Encode repaired it)
    const bool space = IsPythonSpace(DecodeCodePoint(text.substr(at, step.length)));
    if (cuts.chunk_chars > 0 && chunk_chars == cuts.chunk_chars) {
      parts.push_back(text.substr(part_begin, at - part_begin));
      part_begin = at;
      chunk_chars = 0;
    }
    if (chunk_chars == 0 || space != run_is_space) {
      run_is_space = space;
      run_chars = 1;
    } else if (cuts.run_chars > 0 && ++run_chars > cuts.run_chars) {
      parts.push_back(text.substr(part_begin, at - part_begin));
      part_begin = at;
      run_chars = 1;
    }
    ++chunk_chars;
    at += step.length;
  }
  parts.push_back(text.substr(part_begin));
}

}  // namespace mlaserve
