// The byte map is built once into two constant tables (256 forward, 324 reverse entries).
#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "tokenizer/utf8.h"

namespace mlaserve {
namespace {

// GPT-2 keeps bytes that are printable Latin-1 characters as themselves ('!'..'~', '¡'..'¬',
// '®'..'ÿ') and moves the other 68 (controls, space, DEL, NBSP, soft hyphen) to U+0100 upward,
// in byte order. The largest code point used is therefore U+0100 + 67 = U+0143.
constexpr int kMaxMappedCodePoint = 0x100 + 67;

struct ByteTables {
  std::array<char32_t, 256> byte_to_code_point{};
  std::array<int16_t, kMaxMappedCodePoint + 1> code_point_to_byte{};  // -1: not a byte char
};

bool KeepsItsOwnCodePoint(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
         (byte >= 0xAE && byte <= 0xFF);
}

ByteTables BuildTables() {
  ByteTables tables;
  tables.code_point_to_byte.fill(-1);
  int next_moved = 0;
  for (int byte = 0; byte < 256; ++byte) {
    const int code_point = KeepsItsOwnCodePoint(byte) ? byte : 0x100 + next_moved++;
    tables.byte_to_code_point[byte] = static_cast<char32_t>(code_point);
    tables.code_point_to_byte[code_point] = static_cast<int16_t>(byte);
  }
  return tables;
}

const ByteTables& Tables() {
  static const ByteTables tables = BuildTables();
  return tables;
}

}  // namespace

char32_t ByteToUnicode(unsigned char byte) { return Tables().byte_to_code_point[byte]; }

void AppendByteLevelSpelling(std::string_view bytes, std::string* out) {
  const ByteTables& tables = Tables();
  for (char c : bytes) {
    AppendCodePoint(tables.byte_to_code_point[static_cast<unsigned char>(c)], out);
  }
}

bool ByteLevelSpellingToBytes(std::string_view spelling, std::string* out) {
  const ByteTables& tables = Tables();
  size_t pos = 0;
  while (pos < spelling.size()) {
    const Utf8Step step = ScanUtf8(spelling.substr(pos));
    // Every byte character is U+0021..U+0143: one or two UTF-8 bytes.
    if (step.kind != Utf8Kind::kValid || step.length > 2) return false;
    char32_t code_point = static_cast<unsigned char>(spelling[pos]);
    if (step.length == 2) {
      code_point =
          ((code_point & 0x1F) << 6) | (static_cast<unsigned char>(spelling[pos + 1]) & 0x3F);
    }
    if (code_point > kMaxMappedCodePoint) return false;
    const int16_t byte = tables.code_point_to_byte[code_point];
    if (byte < 0) return false;
    out->push_back(static_cast<char>(byte));
    pos += step.length;
  }
  return true;
}

}  // namespace mlaserve
