// The GPT-2 byte map and the UTF-8 scanner everything else builds on.
#include <string>

#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace mlaserve {
namespace {

TEST(TokenizerByteLevel, EveryByteRoundTrips) {
  std::string all_bytes;
  for (int byte = 0; byte < 256; ++byte) all_bytes.push_back(static_cast<char>(byte));
  std::string spelling;
  AppendByteLevelSpelling(all_bytes, &spelling);
  std::string back;
  ASSERT_TRUE(ByteLevelSpellingToBytes(spelling, &back));
  EXPECT_EQ(back, all_bytes);
}

TEST(TokenizerByteLevel, MapIsGpt2s) {
  EXPECT_EQ(ByteToUnicode(' '), U'Ġ');   // U+0120
  EXPECT_EQ(ByteToUnicode('\n'), U'Ċ');  // U+010A
  EXPECT_EQ(ByteToUnicode('\t'), U'ĉ');  // U+0109
  EXPECT_EQ(ByteToUnicode('a'), U'a');
  EXPECT_EQ(ByteToUnicode(0x00), U'\u0100');
  EXPECT_EQ(ByteToUnicode(0xAD), U'\u0143');  // the last moved byte
  EXPECT_EQ(ByteToUnicode(0xFF), U'ÿ');
  // Distinct bytes get distinct characters.
  for (int a = 0; a < 256; ++a) {
    for (int b = a + 1; b < 256; ++b) {
      ASSERT_NE(ByteToUnicode(static_cast<unsigned char>(a)),
                ByteToUnicode(static_cast<unsigned char>(b)));
    }
  }
}

TEST(TokenizerByteLevel, SpellingOfMultibyteText) {
  std::string spelling;
  AppendByteLevelSpelling(" the\n", &spelling);
  EXPECT_EQ(spelling, "ĠtheĊ");
  spelling.clear();
  AppendByteLevelSpelling("é", &spelling);  // C3 A9
  EXPECT_EQ(spelling, "Ã©");
}

TEST(TokenizerByteLevel, RejectsCharactersOutsideTheMap) {
  std::string out;
  EXPECT_FALSE(ByteLevelSpellingToBytes("<｜User｜>", &out));
  out.clear();
  EXPECT_FALSE(ByteLevelSpellingToBytes("a b", &out));  // a raw space is not a byte character
}

TEST(TokenizerUtf8, ClassifiesSequences) {
  EXPECT_EQ(ScanUtf8("a").kind, Utf8Kind::kValid);
  EXPECT_EQ(ScanUtf8("é").length, 2u);
  EXPECT_EQ(ScanUtf8("中").length, 3u);
  EXPECT_EQ(ScanUtf8("😀").length, 4u);
  EXPECT_EQ(ScanUtf8("\xE4\xB8").kind, Utf8Kind::kIncomplete);
  EXPECT_EQ(ScanUtf8("\xF0\x9F\x98").kind, Utf8Kind::kIncomplete);
  EXPECT_EQ(ScanUtf8("\x80").kind, Utf8Kind::kInvalid);
  EXPECT_EQ(ScanUtf8("\xC0\xAF").kind, Utf8Kind::kInvalid);  // overlong
  const Utf8Step surrogate = ScanUtf8("\xED\xA0\x80");       // U+D800
  EXPECT_EQ(surrogate.kind, Utf8Kind::kInvalid);
  EXPECT_EQ(surrogate.length, 1u);
  const Utf8Step cut_short = ScanUtf8("\xE4\xB8x");  // a valid prefix, then a non-continuation
  EXPECT_EQ(cut_short.kind, Utf8Kind::kInvalid);
  EXPECT_EQ(cut_short.length, 2u);
}

TEST(TokenizerUtf8, LossyReplacesMaximalSubparts) {
  std::string out;
  AppendUtf8Lossy("a\xE4\xB8x\x80\xF0\x9F", &out);
  EXPECT_EQ(out, "a\uFFFDx\uFFFD\uFFFD");
  EXPECT_TRUE(IsValidUtf8(out));
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  EXPECT_TRUE(IsValidUtf8(""));
}

}  // namespace
}  // namespace mlaserve
