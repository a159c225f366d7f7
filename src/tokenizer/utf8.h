// UTF-8 scanning shared by encoding (input validation) and decoding (lossy output, streaming).
// One rule everywhere: an ill-formed sequence becomes one U+FFFD per "maximal subpart"
// (Unicode ch. 3, the rule Python's and Rust's lossy decoders follow), so a streamed decode
// and a whole-sequence decode of the same bytes produce the same text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mlaserve {

inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";  // U+FFFD

enum class Utf8Kind {
  kValid,       // a whole, well-formed character of `length` bytes
  kInvalid,     // `length` bytes (>= 1) that can never start a character: replace with one U+FFFD
  kIncomplete,  // all remaining bytes (`length`) are a well-formed but truncated prefix
};

struct Utf8Step {
  Utf8Kind kind;
  size_t length;
};

// Classifies the character starting at bytes[0]. `bytes` must be non-empty.
Utf8Step ScanUtf8(std::string_view bytes);

// True when the whole of `bytes` is well-formed UTF-8.
bool IsValidUtf8(std::string_view bytes);

// Appends `bytes` to `out`, replacing ill-formed parts (including a truncated tail) with U+FFFD.
void AppendUtf8Lossy(std::string_view bytes, std::string* out);

// The code point of one whole, well-formed character (`bytes` as ScanUtf8 measured it).
char32_t DecodeCodePoint(std::string_view bytes);

// Appends the UTF-8 encoding of `code_point` (which must be a valid scalar value).
void AppendCodePoint(char32_t code_point, std::string* out);

}  // namespace mlaserve
