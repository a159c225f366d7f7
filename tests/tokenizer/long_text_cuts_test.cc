// Kimi's cuts of long text (tokenization_kimi.py's encode): every expected list below is what
// the reference's loops give for the same input and limits, run in Python.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tokenizer/long_text_cuts.h"

namespace mlaserve {
namespace {

std::vector<std::string> Cut(std::string_view text, LongTextCuts cuts) {
  std::vector<std::string_view> parts;
  CutLongText(text, cuts, &parts);
  return std::vector<std::string>(parts.begin(), parts.end());
}

using Strings = std::vector<std::string>;

TEST(LongTextCuts, ChunksAreCutEveryNCharacters) {
  EXPECT_EQ(Cut("abcdefghijkl", {.chunk_chars = 5}), (Strings{"abcde", "fghij", "kl"}));
  // Characters (code points, as Python's str counts), not bytes: seven two-byte letters.
  EXPECT_EQ(Cut("ééééééé", {.chunk_chars = 5}), (Strings{"ééééé", "éé"}));
  // Exactly one chunk: no empty part after it.
  EXPECT_EQ(Cut("abcde", {.chunk_chars = 5}), (Strings{"abcde"}));
  EXPECT_EQ(Cut("", {.chunk_chars = 5, .run_chars = 2}), (Strings{""}));
  EXPECT_EQ(Cut("abcdefgh", {}), (Strings{"abcdefgh"}));
}

TEST(LongTextCuts, RunsAreCutWithinEachChunkAndCountedAfresh) {
  // Chunks "aaaaaa" | "aaa" first; then the first chunk's run of six is cut after four.
  EXPECT_EQ(Cut("aaaaaaaaa", {.chunk_chars = 6, .run_chars = 4}), (Strings{"aaaa", "aa", "aaa"}));
  // Whitespace runs are cut too; U+3000 is whitespace for str.isspace.
  EXPECT_EQ(Cut("a   b", {.run_chars = 2}), (Strings{"a  ", " b"}));
  EXPECT_EQ(Cut("ab\u3000\u3000\u3000x", {.run_chars = 2}), (Strings{"ab\u3000\u3000", "\u3000x"}));
}

TEST(LongTextCuts, KimisLimitsOnARunAcrossTheChunkBoundary) {
  // 399,990 characters of "a " then 30,000 letters: the chunk cut leaves 10 of them in the first
  // chunk, so the run cut falls 25,000 letters into the second chunk, not 25,000 into the run.
  std::string text;
  for (int i = 0; i < 199'995; ++i) text += "a ";
  text += std::string(30'000, 'b');
  std::vector<std::string_view> parts;
  CutLongText(text, {.chunk_chars = 400'000, .run_chars = 25'000}, &parts);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].size(), 400'000u);
  EXPECT_EQ(parts[1], std::string(25'000, 'b'));
  EXPECT_EQ(parts[2], std::string(4'990, 'b'));
}

}  // namespace
}  // namespace mlaserve
