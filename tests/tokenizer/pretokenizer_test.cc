// Pre-tokenizer semantics: Split behaviors and invert, Digits, ByteLevel's prefix space, and
// DeepSeek-V3's real pre_tokenizer Sequence on text that exercises every alternative.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tokenizer_test_util.h"
#include "tokenizer/tokenizer_model.h"

namespace mlaserve {
namespace {

using nlohmann::json;

// The pieces `text` is cut into by a tokenizer.json with this pre_tokenizer section.
std::vector<std::string> Pieces(const json& pre_tokenizer, std::string_view text) {
  testing::TokenizerJsonSpec spec;
  spec.pre_tokenizer = pre_tokenizer;
  Result<std::unique_ptr<TokenizerModel>> model =
      ParseHfTokenizerJson(testing::MakeTokenizerJson(spec).dump(), "tokenizer.json");
  EXPECT_TRUE(model.ok()) << model.error();
  if (!model.ok()) return {};
  PreTokenizeScratch scratch;
  std::vector<std::string_view> views;
  Status status = model.value()->pre_tokenizer.Split(text, &scratch, &views);
  EXPECT_TRUE(status.ok()) << status.message();
  return {views.begin(), views.end()};
}

// Split, then ByteLevel without its own regex (a tokenizer.json must have a ByteLevel step).
json SplitThenByteLevel(json split) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {split, {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
}

json SplitOn(const std::string& literal, const std::string& behavior, bool invert = false) {
  return SplitThenByteLevel({{"type", "Split"},
                             {"pattern", {{"String", literal}}},
                             {"behavior", behavior},
                             {"invert", invert}});
}

using Strings = std::vector<std::string>;

// The examples from Hugging Face's SplitDelimiterBehavior documentation.
TEST(TokenizerPreTokenizer, SplitBehaviors) {
  const std::string text = "the-final--countdown";
  EXPECT_EQ(Pieces(SplitOn("-", "Removed"), text), (Strings{"the", "final", "countdown"}));
  EXPECT_EQ(Pieces(SplitOn("-", "Isolated"), text),
            (Strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(Pieces(SplitOn("-", "MergedWithPrevious"), text),
            (Strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(Pieces(SplitOn("-", "MergedWithNext"), text),
            (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(Pieces(SplitOn("-", "Contiguous"), text),
            (Strings{"the", "-", "final", "--", "countdown"}));
}

TEST(TokenizerPreTokenizer, SplitEdgesAndInvert) {
  EXPECT_EQ(Pieces(SplitOn("-", "Isolated"), "-a-"), (Strings{"-", "a", "-"}));
  EXPECT_EQ(Pieces(SplitOn("-", "MergedWithPrevious"), "-a"), (Strings{"-", "a"}));
  EXPECT_EQ(Pieces(SplitOn("-", "MergedWithNext"), "a-"), (Strings{"a", "-"}));
  EXPECT_EQ(Pieces(SplitOn("-", "Removed"), "---"), Strings{});
  // With invert the pattern matches what to keep: "Removed" then drops the rest.
  const json keep_words = SplitThenByteLevel({{"type", "Split"},
                                              {"pattern", {{"Regex", "[a-z]+"}}},
                                              {"behavior", "Removed"},
                                              {"invert", true}});
  EXPECT_EQ(Pieces(keep_words, "ab12cd!"), (Strings{"ab", "cd"}));
}

TEST(TokenizerPreTokenizer, RegexWithUnicodeClasses) {
  const json words = SplitThenByteLevel(
      {{"type", "Split"}, {"pattern", {{"Regex", R"(\p{L}+)"}}}, {"behavior", "Isolated"}});
  EXPECT_EQ(Pieces(words, "Straße, 中文!"), (Strings{"Straße", ", ", "中文", "!"}));
}

TEST(TokenizerPreTokenizer, Digits) {
  const json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  const json individual = {
      {"type", "Sequence"},
      {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level}}};
  const json grouped = {
      {"type", "Sequence"},
      {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", false}}, byte_level}}};
  EXPECT_EQ(Pieces(individual, "a123b4"), (Strings{"a", "1", "2", "3", "b", "4"}));
  EXPECT_EQ(Pieces(grouped, "a123b4"), (Strings{"a", "123", "b", "4"}));
}

TEST(TokenizerPreTokenizer, ByteLevelGpt2RegexAndPrefixSpace) {
  const json plain = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  EXPECT_EQ(Pieces(plain, "Hello world's  end 42!\n"),
            (Strings{"Hello", " world", "'s", " ", " end", " 42", "!", "\n"}));
  const json prefixed = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(Pieces(prefixed, "Hello world"), (Strings{" Hello", " world"}));
  EXPECT_EQ(Pieces(prefixed, " Hello"), (Strings{" Hello"}));
}

// DeepSeek-V3's tokenizer.json pre_tokenizer, as published (the patterns hold literal CR/LF).
json DeepSeekV3PreTokenizer() {
  const std::string punctuation_word = R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+)";
  const std::string rest = punctuation_word +
                           "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
                           "| ?[\\p{P}\\p{S}]+[\r\n]*"
                           "|\\s*[\r\n]+"
                           "|\\s+(?!\\S)"
                           "|\\s+";
  auto split = [](const std::string& regex) {
    return json{{"type", "Split"},
                {"pattern", {{"Regex", regex}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  };
  return {{"type", "Sequence"},
          {"pretokenizers",
           {split(R"(\p{N}{1,3})"),
            split("[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"),
            split(rest),
            {{"type", "ByteLevel"},
             {"add_prefix_space", false},
             {"trim_offsets", true},
             {"use_regex", false}}}}};
}

// Expected pieces were worked out independently with Python's `regex` module applying the
// three patterns in sequence (Isolated), as Hugging Face does.
TEST(TokenizerPreTokenizer, DeepSeekV3Sequence) {
  const json pre = DeepSeekV3PreTokenizer();
  EXPECT_EQ(Pieces(pre, "Hello, world! 1234567 items"),
            (Strings{"Hello", ",", " world", "!", " ", "123", "456", "7", " items"}));
  EXPECT_EQ(Pieces(pre, "价格是100元。日本語のテキストです"),
            (Strings{"价格是", "100", "元", "。", "日本語のテキストです"}));
  EXPECT_EQ(Pieces(pre, "it's (x)=>{y}; a.b_c   end\t\n\n  x"),
            (Strings{"it", "'s", " (", "x", ")=>{", "y", "};", " a", ".b", "_c", "  ", " end",
                     "\t\n\n", " ", " x"}));
  EXPECT_EQ(Pieces(pre, "naïve café 😀👍 ok?!"), (Strings{"naïve", " café", " 😀👍", " ok", "?!"}));
  EXPECT_EQ(Pieces(pre, "  \r\n\tindent"), (Strings{"  \r\n", "\tindent"}));
  EXPECT_EQ(Pieces(pre, "x   "), (Strings{"x", "   "}));
  EXPECT_EQ(Pieces(pre, "@user #tag 3.14"), (Strings{"@user", " #", "tag", " ", "3", ".", "14"}));
}

TEST(TokenizerPreTokenizer, LongWhitespaceRunDoesNotBlowTheStack) {
  const std::string spaces(200000, ' ');
  const std::vector<std::string> pieces = Pieces(DeepSeekV3PreTokenizer(), spaces + "x");
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].size(), spaces.size() - 1);
  EXPECT_EQ(pieces[1], " x");
}

}  // namespace
}  // namespace mlaserve
