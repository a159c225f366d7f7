// The Unicode version the tokenizer reports is the linked libpcre2's, it predicts how characters
// added after the tested version classify, and only another version draws the warning.
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "tokenizer/regex.h"
#include "tokenizer/unicode_version.h"

namespace mlaserve {
namespace {

TEST(TokenizerUnicodeVersion, LooksLikeAVersion) {
  // (That it is the linked library's is what PredictsHowCharactersAddedAfterFourteenClassify
  // checks through real classifications; comparing with pcre2_config here would repeat the code.)
  EXPECT_TRUE(std::regex_match(TokenizerUnicodeVersion(), std::regex(R"(\d+\.\d+\.\d+)")))
      << TokenizerUnicodeVersion();
  EXPECT_EQ(Pcre2Version().substr(0, 3), "10.") << Pcre2Version();
}

TEST(TokenizerUnicodeVersion, WarnsOnlyForAnotherVersion) {
  EXPECT_FALSE(UnicodeVersionWarning(kTestedUnicodeVersion).has_value());
  const std::optional<std::string> warning = UnicodeVersionWarning("15.1.0");
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("Unicode 15.1.0"), std::string::npos) << *warning;
  EXPECT_NE(warning->find(std::string(kTestedUnicodeVersion)), std::string::npos) << *warning;
  EXPECT_EQ(warning->find('\n'), std::string::npos);  // one log line
}

// Characters first assigned in Unicode 15.0 are in \p{N} / \p{sc:Han} exactly when the host's
// tables are 15.0 or later: the dependence the reported version describes.
TEST(TokenizerUnicodeVersion, PredictsHowCharactersAddedAfterFourteenClassify) {
  const int major = std::stoi(TokenizerUnicodeVersion());
  const bool knows_unicode_15 = major >= 15;
  auto matches = [](const char* pattern, std::string_view text) {
    Result<Regex> regex = Regex::Compile(pattern);
    EXPECT_TRUE(regex.ok()) << regex.error();
    RegexMatchData scratch;
    RegexMatch match;
    Result<bool> found = regex->Find(text, 0, scratch, &match);
    EXPECT_TRUE(found.ok());
    return found.ok() && found.value();
  };
  EXPECT_EQ(matches(R"(\p{N})", "\xF0\x9D\x8B\x80"), knows_unicode_15);       // U+1D2C0 KAKTOVIK NUMERAL ZERO
  EXPECT_EQ(matches(R"(\p{sc:Han})", "\xF0\xB1\x8D\x90"), knows_unicode_15);  // U+31350, CJK Extension H
  EXPECT_TRUE(matches(R"(\p{N})", "7"));  // the check itself works
}

}  // namespace
}  // namespace mlaserve
