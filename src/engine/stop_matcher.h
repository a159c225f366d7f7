// Stop strings over a request's streamed output text (SGLang's `stop`). Fed the pieces a
// StreamDecoder emits, it finds a stop string even when it spans pieces, says what text is safe
// to stream now, and trims the stop string from the output.
//
// - Matching is on bytes. Stop strings and pieces are UTF-8 with whole characters (what
//   StreamDecoder produces), so a match and the held-back boundary fall between characters.
// - Held back: the longest suffix of the text that is a proper prefix of some stop string; it
//   may yet become a stop string, so it is not streamed until disproved or Finish() is called.
// - On a match, generation must stop. The output ends where the earliest-ending match begins
//   (SGLang's trim: text from the stop string on is dropped) or, with keep_stop_string
//   (SGLang's no_stop_trim), where it ends. Among stop strings ending at the same byte, the
//   longest wins. Bytes after the match in the same piece are dropped.
// Cost: O(bytes fed * number of stop strings) amortised (one KMP automaton per stop string);
// the text is never rescanned.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mlaserve {

class StopMatcher {
 public:
  // Empty stop strings are ignored (Validate rejects them).
  explicit StopMatcher(std::span<const std::string> stop_strings, bool keep_stop_string = false);

  // Appends `piece` and returns the text that became safe to stream, possibly empty. The view
  // is valid until the next call. After a stop (or Finish), further pieces are ignored.
  std::string_view Push(std::string_view piece);

  // The request ended for another reason (EOS, length, abort): returns the held-back text.
  // Feed StreamDecoder::Flush()'s result through Push() first.
  std::string_view Finish();

  bool stopped() const { return matched_index_ >= 0; }
  // Index into the constructor's stop_strings of the match; -1 when none.
  int matched_index() const { return matched_index_; }
  // The output text so far, stop string trimmed once stopped; streamed text is a prefix of it.
  std::string_view text() const { return text_; }
  size_t held_back_bytes() const { return text_.size() - released_bytes_; }

 private:
  struct Pattern {
    std::string bytes;
    int index = 0;                  // in the constructor's stop_strings
    std::vector<uint32_t> border;   // [bytes.size()] KMP: longest proper border of bytes[0..i]
    uint32_t matched = 0;           // bytes of this pattern matched at the end of the text
  };

  std::string_view Release(size_t end);

  std::vector<Pattern> patterns_;
  bool keep_stop_string_;
  std::string text_;               // all output text fed so far (trimmed after a stop)
  size_t released_bytes_ = 0;      // text_[0, released_bytes_) has been returned
  int matched_index_ = -1;
  bool finished_ = false;
};

}  // namespace mlaserve
