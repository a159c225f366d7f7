// UTF-8 classification per the well-formed byte sequence table (Unicode 15, table 3-7).
#include "tokenizer/utf8.h"

#include <cstdint>

namespace mlaserve {
namespace {

bool InRange(uint8_t byte, uint8_t lo, uint8_t hi) { return byte >= lo && byte <= hi; }

}  // namespace

Utf8Step ScanUtf8(std::string_view bytes) {
  const auto lead = static_cast<uint8_t>(bytes[0]);
  if (lead < 0x80) return {Utf8Kind::kValid, 1};

  size_t need = 0;           // total length of the character the lead byte announces
  uint8_t second_lo = 0x80;  // the second byte's range depends on the lead (no overlongs, no
  uint8_t second_hi = 0xBF;  // surrogates, nothing above U+10FFFF)
  if (InRange(lead, 0xC2, 0xDF)) {
    need = 2;
  } else if (lead == 0xE0) {
    need = 3;
    second_lo = 0xA0;
  } else if (InRange(lead, 0xE1, 0xEC) || InRange(lead, 0xEE, 0xEF)) {
    need = 3;
  } else if (lead == 0xED) {
    need = 3;
    second_hi = 0x9F;
  } else if (lead == 0xF0) {
    need = 4;
    second_lo = 0x90;
  } else if (InRange(lead, 0xF1, 0xF3)) {
    need = 4;
  } else if (lead == 0xF4) {
    need = 4;
    second_hi = 0x8F;
  } else {
    return {Utf8Kind::kInvalid, 1};  // continuation byte, C0/C1, or F5..FF
  }

  // Walk the continuation bytes; the maximal subpart ends at the first byte that does not fit.
  for (size_t i = 1; i < need; ++i) {
    if (i == bytes.size()) return {Utf8Kind::kIncomplete, i};
    const auto byte = static_cast<uint8_t>(bytes[i]);
    const bool fits = (i == 1) ? InRange(byte, second_lo, second_hi) : InRange(byte, 0x80, 0xBF);
    if (!fits) return {Utf8Kind::kInvalid, i};
  }
  return {Utf8Kind::kValid, need};
}

bool IsValidUtf8(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    // ASCII fast path: most prompts are mostly ASCII.
    if (static_cast<uint8_t>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Step step = ScanUtf8(bytes.substr(pos));
    if (step.kind != Utf8Kind::kValid) return false;
    pos += step.length;
  }
  return true;
}

void AppendUtf8Lossy(std::string_view bytes, std::string* out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Step step = ScanUtf8(bytes.substr(pos));
    if (step.kind == Utf8Kind::kValid) {
      out->append(bytes.data() + pos, step.length);
    } else {
      out->append(kUtf8Replacement);
    }
    pos += step.length;
  }
}

void AppendCodePoint(char32_t code_point, std::string* out) {
  const auto cp = static_cast<uint32_t>(code_point);
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t DecodeCodePoint(std::string_view bytes) {
  const auto b = [&](size_t k) { return char32_t(uint8_t(bytes[k])); };
  switch (bytes.size()) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

}  // namespace mlaserve
