// `\s` in tokenizer patterns means Unicode's White_Space, as in the Oniguruma / Rust regexes
// Hugging Face runs: PCRE2's own `\s` also matches U+180E, which split DeepSeek-V3's
// " \u180E" differently from transformers (issue 12, item 5).
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/regex.h"

namespace mlaserve {
namespace {

// The whole of `text` matched by `pattern` from byte 0.
bool MatchesAll(const std::string& pattern, const std::string& text) {
  auto re = Regex::Compile(pattern);
  EXPECT_TRUE(re.ok()) << re.error();
  if (!re.ok()) return false;
  RegexMatchData scratch;
  RegexMatch m;
  auto found = re->Find(text, 0, scratch, &m);
  return found.ok() && *found && m.begin == 0 && m.end == text.size();
}

TEST(RegexWhiteSpace, BackslashSIsUnicodeWhiteSpaceWithoutU180E) {
  const std::string mvs = "\xE1\xA0\x8E";     // U+180E MONGOLIAN VOWEL SEPARATOR (not White_Space)
  const std::string em_space = "\xE2\x80\x83";  // U+2003 (White_Space)
  const std::string ideographic = "\xE3\x80\x80";  // U+3000
  EXPECT_TRUE(MatchesAll("\\s+", " \t\n\r\f\v" + em_space + ideographic + "\xC2\x85\xC2\xA0"));
  EXPECT_FALSE(MatchesAll("\\s", mvs));
  EXPECT_TRUE(MatchesAll("\\S", mvs));
  EXPECT_FALSE(MatchesAll("\\S", em_space));
  // Inside classes, negated classes, and next to escaped backslashes.
  EXPECT_TRUE(MatchesAll("[\\s\\d]+", "1 2" + em_space));
  EXPECT_FALSE(MatchesAll("[\\s]", mvs));
  EXPECT_TRUE(MatchesAll("[^\\s\\p{L}]", mvs));
  EXPECT_FALSE(MatchesAll("[^\\s\\p{L}]", em_space));
  EXPECT_TRUE(MatchesAll("\\\\s", "\\s"));  // an escaped backslash, then a literal 's'
  EXPECT_TRUE(MatchesAll("[]\\s]+", "] "));   // ']' first in a class is a member
  EXPECT_TRUE(MatchesAll("[[:alpha:]\\s]+", "ab c"));
  // DeepSeek-V3's whitespace alternatives: " \u180E" is not one whitespace run.
  EXPECT_FALSE(MatchesAll("\\s+(?!\\S)|\\s+", " " + mvs));
}

}  // namespace
}  // namespace mlaserve
