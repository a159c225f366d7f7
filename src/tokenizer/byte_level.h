// GPT-2's reversible byte <-> printable-character map ("byte-level" BPE).
// Vocabulary files spell every token with these characters (a space is "Ġ", a newline "Ċ");
// the engine runs BPE on raw bytes and uses this map only at the file boundary: turning
// vocab/merge strings into bytes at load time, and token bytes back into vocab spelling.
#pragma once

#include <string>
#include <string_view>

namespace mlaserve {

// The code point that stands for `byte` in vocabulary files.
char32_t ByteToUnicode(unsigned char byte);

// Appends the vocabulary spelling of raw `bytes` (each byte becomes one character).
void AppendByteLevelSpelling(std::string_view bytes, std::string* out);

// Converts a vocabulary spelling back into raw bytes. Returns false (leaving *out in an
// unspecified state) when some character is not one of the 256 byte characters, e.g. for an
// added token written in plain text.
bool ByteLevelSpellingToBytes(std::string_view spelling, std::string* out);

}  // namespace mlaserve
