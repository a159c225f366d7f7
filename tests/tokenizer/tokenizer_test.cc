// End-to-end encode/decode on small hand-written tokenizer.json files: merge order, added
// tokens, BOS handling, invalid input, and the loader's error messages.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_model.h"
#include "tokenizer_test_util.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using Strings = std::vector<std::string>;
using testing::LoadOrDie;
using testing::MakeTokenizerJson;
using testing::TokenizerJsonSpec;
using testing::TokenTexts;

TEST(TokenizerBpe, LowestRankMergesFirst) {
  TokenizerJsonSpec spec;
  spec.merges = {{"a", "b"}, {"b", "c"}};
  EXPECT_EQ(TokenTexts(LoadOrDie(MakeTokenizerJson(spec)), "abc"), (Strings{"ab", "c"}));
  spec.merges = {{"b", "c"}, {"a", "b"}};
  EXPECT_EQ(TokenTexts(LoadOrDie(MakeTokenizerJson(spec)), "abc"), (Strings{"a", "bc"}));
}

TEST(TokenizerBpe, BothMergeFormatsAndChains) {
  TokenizerJsonSpec spec;
  spec.merges = {{"t", "h"}, {"th", "e"}, {" ", "c"}, {" c", "a"}, {" ca", "t"}, {"e", "r"}};
  for (bool as_pairs : {false, true}) {
    spec.merges_as_pairs = as_pairs;
    const Tokenizer tokenizer = LoadOrDie(MakeTokenizerJson(spec));
    EXPECT_EQ(TokenTexts(tokenizer, "the cat"), (Strings{"the", " cat"}));
    // "ther": "th" (rank 0) then "the" (rank 1) beat "er" (rank 5).
    EXPECT_EQ(TokenTexts(tokenizer, "ther"), (Strings{"the", "r"}));
    // Pieces never merge across pre-tokenizer boundaries: "e" and " c" stay apart.
    EXPECT_EQ(TokenTexts(tokenizer, "e cat"), (Strings{"e", " cat"}));
  }
}

TEST(TokenizerBpe, EqualRanksMergeLeftmostFirst) {
  TokenizerJsonSpec spec;
  spec.merges = {{"a", "a"}};
  EXPECT_EQ(TokenTexts(LoadOrDie(MakeTokenizerJson(spec)), "aaa"), (Strings{"aa", "a"}));
  spec.merges = {{"a", "a"}, {"aa", "aa"}};
  EXPECT_EQ(TokenTexts(LoadOrDie(MakeTokenizerJson(spec)), "aaaaa"), (Strings{"aaaa", "a"}));
}

// The heap-based merge loop against the plain quadratic one on random merges and words.
TEST(TokenizerBpe, FastPathMatchesReference) {
  std::mt19937 rng(1234);
  const std::string alphabet = "abcd";
  for (int trial = 0; trial < 20; ++trial) {
    // Random merges built bottom-up so every merged token exists.
    std::vector<std::string> tokens = {"a", "b", "c", "d"};
    TokenizerJsonSpec spec;
    for (int m = 0; m < 30; ++m) {
      const std::string& left = tokens[rng() % tokens.size()];
      const std::string& right = tokens[rng() % tokens.size()];
      if (left.size() + right.size() > 6) continue;
      spec.merges.emplace_back(left, right);
      tokens.push_back(left + right);
    }
    Result<std::unique_ptr<TokenizerModel>> model =
        ParseHfTokenizerJson(MakeTokenizerJson(spec).dump(), "tokenizer.json");
    ASSERT_TRUE(model.ok()) << model.error();
    BpeScratch scratch;
    for (int w = 0; w < 50; ++w) {
      std::string word;
      const size_t length = 1 + rng() % 40;
      for (size_t i = 0; i < length; ++i) word.push_back(alphabet[rng() % alphabet.size()]);
      std::vector<TokenId> fast;
      std::vector<TokenId> reference;
      model.value()->bpe.EncodePiece(word, &scratch, &fast);
      model.value()->bpe.EncodePieceReference(word, &reference);
      ASSERT_EQ(fast, reference) << "word " << word << " trial " << trial;
    }
  }
}

TEST(TokenizerBpe, LongPieceIsNotQuadratic) {
  TokenizerJsonSpec spec;
  spec.merges = {{"a", "a"}, {"aa", "aa"}, {"aaaa", "aaaa"}};
  const Tokenizer tokenizer = LoadOrDie(MakeTokenizerJson(spec));
  const std::string text(400000, 'a');  // one pre-tokenizer piece
  Result<std::vector<TokenId>> ids = tokenizer.Encode(text, false);
  ASSERT_TRUE(ids.ok()) << ids.error();
  EXPECT_EQ(ids->size(), text.size() / 8);
  EXPECT_EQ(tokenizer.Decode(ids.value()), text);
}

Tokenizer TokenizerWithAddedTokens() {
  TokenizerJsonSpec spec;
  spec.merges = {{"h", "i"}};
  spec.added_tokens = json::array({
      testing::AddedTokenJson(1000, "<|bos|>", true),
      testing::AddedTokenJson(1001, "<|im|>", true),
      testing::AddedTokenJson(1002, "<|im_end|>", true),
      testing::AddedTokenJson(1003, "New York", false),
  });
  return LoadOrDie(MakeTokenizerJson(spec), R"({"bos_token": {"content": "<|bos|>"},
                                               "eos_token": "<|im_end|>"})");
}

TEST(TokenizerAddedTokens, MatchedInRawTextLongestFirst) {
  const Tokenizer tokenizer = TokenizerWithAddedTokens();
  Result<std::vector<TokenId>> ids = tokenizer.Encode("hi<|im_end|><|im|>New York!", false);
  ASSERT_TRUE(ids.ok()) << ids.error();
  const TokenId hi = tokenizer.TokenToId("hi").value();
  EXPECT_EQ(ids.value(), (std::vector<TokenId>{hi, 1002, 1001, 1003, '!'}));
  // A prefix of an added token is plain text.
  EXPECT_EQ(TokenTexts(tokenizer, "<|im"), (Strings{"<", "|", "i", "m"}));
}

TEST(TokenizerAddedTokens, DecodeAndSkipSpecial) {
  const Tokenizer tokenizer = TokenizerWithAddedTokens();
  const std::string text = "<|bos|>hi New York<|im_end|>";
  Result<std::vector<TokenId>> ids = tokenizer.Encode(text, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(tokenizer.Decode(ids.value()), text);
  EXPECT_EQ(tokenizer.Decode(ids.value(), /*skip_special_tokens=*/true), "hi New York");
  EXPECT_TRUE(tokenizer.IsSpecial(1000));
  EXPECT_FALSE(tokenizer.IsSpecial(1003));
  EXPECT_FALSE(tokenizer.IsSpecial(tokenizer.TokenToId("hi").value()));
  EXPECT_EQ(tokenizer.IdToToken(1002), "<|im_end|>");
  EXPECT_EQ(tokenizer.TokenToId("<|im_end|>"), 1002);
  EXPECT_EQ(tokenizer.IdToToken(' '), "Ġ");
  EXPECT_EQ(tokenizer.TokenToId("Ġ"), ' ');
  EXPECT_FALSE(tokenizer.TokenToId("nope").has_value());
  EXPECT_EQ(tokenizer.IdToToken(-1), "");
  EXPECT_EQ(tokenizer.IdToToken(999), "");  // a hole in the id space
  EXPECT_EQ(tokenizer.vocab_size(), 1004u);
}

TEST(TokenizerAddedTokens, LstripAndRstripSwallowSpaces) {
  TokenizerJsonSpec spec;
  json mask = testing::AddedTokenJson(500, "<mask>", true);
  mask["lstrip"] = true;
  mask["rstrip"] = true;
  spec.added_tokens = json::array({mask});
  const Tokenizer tokenizer = LoadOrDie(MakeTokenizerJson(spec));
  EXPECT_EQ(TokenTexts(tokenizer, "a  <mask> b"), (Strings{"a", "<mask>", "b"}));
}

TEST(TokenizerBos, ConfigDecidesBosAndDefault) {
  const Tokenizer tokenizer = TokenizerWithAddedTokens();
  EXPECT_EQ(tokenizer.bos_id(), 1000);
  EXPECT_EQ(tokenizer.eos_id(), 1002);
  EXPECT_TRUE(tokenizer.add_bos());  // not in the config: defaults to true with a BOS
  Result<std::vector<TokenId>> with_bos = tokenizer.Encode("hi", true);
  ASSERT_TRUE(with_bos.ok());
  EXPECT_EQ(with_bos->front(), 1000);
  EXPECT_EQ(with_bos->size(), 2u);
  Result<std::vector<TokenId>> empty = tokenizer.Encode("", false);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());

  TokenizerJsonSpec spec;
  spec.added_tokens = json::array({testing::AddedTokenJson(300, "<s>", true)});
  const Tokenizer no_default =
      LoadOrDie(MakeTokenizerJson(spec), R"({"bos_token": "<s>", "add_bos_token": false})");
  EXPECT_FALSE(no_default.add_bos());
  EXPECT_EQ(no_default.bos_id(), 300);
  const Tokenizer no_config = LoadOrDie(MakeTokenizerJson(spec));
  EXPECT_FALSE(no_config.bos_id().has_value());
  EXPECT_FALSE(no_config.add_bos());
  Result<std::vector<TokenId>> ids = no_config.Encode("a", /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids.value(), std::vector<TokenId>{'a'});
}

TEST(TokenizerEncode, RoundTripsText) {
  TokenizerJsonSpec spec;
  spec.merges = {{"t", "h"}, {" ", "t"}, {" t", "h"}, {"e", "r"}};
  const Tokenizer tokenizer = LoadOrDie(MakeTokenizerJson(spec));
  const std::vector<std::string> texts = {"", "the other there", "  spaced  out\n\n\ttabs\r\n",
                                          "Ünïcödé 中文 😀 𝄞", std::string("a\0b", 3)};
  for (const std::string& text : texts) {
    Result<std::vector<TokenId>> ids = tokenizer.Encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.error();
    EXPECT_EQ(tokenizer.Decode(ids.value()), text);
  }
}

TEST(TokenizerEncode, InvalidUtf8BecomesReplacementCharacter) {
  const Tokenizer tokenizer = LoadOrDie(MakeTokenizerJson({}));
  Result<std::vector<TokenId>> ids = tokenizer.Encode(
      "a\xFF"
      "b\xE4\xB8",
      false);
  ASSERT_TRUE(ids.ok()) << ids.error();
  EXPECT_EQ(tokenizer.Decode(ids.value()),
            "a\uFFFD"
            "b\uFFFD");
}

// A catastrophically backtracking pattern hits PCRE2's match limit: an error, not a hang.
TEST(TokenizerEncode, RegexEngineFailureIsAnError) {
  TokenizerJsonSpec spec;
  spec.pre_tokenizer = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", "(?:(?:a|aa)*)*[bc]"}}},
                           {"behavior", "Isolated"}},
                          {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  const Tokenizer tokenizer = LoadOrDie(MakeTokenizerJson(spec));
  Result<std::vector<TokenId>> ids = tokenizer.Encode(std::string(40, 'a'), false);
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.error().find("match limit"), std::string::npos) << ids.error();
}

TEST(TokenizerDecode, PartialAndUnknownIds) {
  const Tokenizer tokenizer = LoadOrDie(MakeTokenizerJson({}));
  // The three bytes of "中" (E4 B8 AD) are byte tokens 0xE4, 0xB8, 0xAD.
  EXPECT_EQ(tokenizer.Decode(std::vector<TokenId>{0xE4, 0xB8, 0xAD}), "中");
  EXPECT_EQ(tokenizer.Decode(std::vector<TokenId>{0xE4, 0xB8}), "\uFFFD");
  EXPECT_EQ(tokenizer.Decode(std::vector<TokenId>{'a', -5, 100000, 'b'}), "ab");
}

// ---- loader errors: one line naming the file and the problem ----

std::string LoadError(const json& tokenizer_json, const std::string& config = {}) {
  Result<Tokenizer> tokenizer = Tokenizer::FromJsonText(tokenizer_json.dump(), config);
  EXPECT_FALSE(tokenizer.ok());
  return tokenizer.ok() ? "" : tokenizer.error();
}

TEST(TokenizerErrors, MissingFiles) {
  Result<Tokenizer> tokenizer = Tokenizer::FromDirectory("/nonexistent/model");
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.error().find("/nonexistent/model/tokenizer.json"), std::string::npos);
  EXPECT_NE(tokenizer.error().find("missing"), std::string::npos);
}

TEST(TokenizerErrors, BadJson) {
  Result<Tokenizer> tokenizer = Tokenizer::FromJsonText("{\"model\": [1, 2", "");
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.error().find("tokenizer.json: not valid JSON"), std::string::npos)
      << tokenizer.error();
  Result<Tokenizer> bad_config = Tokenizer::FromJsonText(MakeTokenizerJson({}).dump(), "{,}");
  ASSERT_FALSE(bad_config.ok());
  EXPECT_NE(bad_config.error().find("tokenizer_config.json: not valid JSON"), std::string::npos);
}

TEST(TokenizerErrors, UnsupportedModelTypes) {
  for (const char* type : {"WordPiece", "Unigram", "WordLevel"}) {
    json doc = MakeTokenizerJson({});
    doc["model"]["type"] = type;
    const std::string error = LoadError(doc);
    EXPECT_NE(error.find(std::string("model type '") + type + "' is not supported"),
              std::string::npos)
        << error;
  }
}

TEST(TokenizerErrors, BadRegexCarriesPcre2Message) {
  TokenizerJsonSpec spec;
  spec.pre_tokenizer = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  const std::string error = LoadError(MakeTokenizerJson(spec));
  EXPECT_NE(error.find("tokenizer.json: pre_tokenizer.pretokenizers[0].pattern"), std::string::npos)
      << error;
  EXPECT_NE(error.find("missing closing parenthesis"), std::string::npos) << error;
}

TEST(TokenizerErrors, UnsupportedPiecesNameThemselves) {
  TokenizerJsonSpec spec;
  spec.pre_tokenizer = {{"type", "Whitespace"}};
  EXPECT_NE(LoadError(MakeTokenizerJson(spec)).find("type 'Whitespace' is not supported"),
            std::string::npos);

  spec.pre_tokenizer = {
      {"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Isolated"}};
  EXPECT_NE(LoadError(MakeTokenizerJson(spec)).find("no ByteLevel step"), std::string::npos);

  json with_normalizer = MakeTokenizerJson({});
  with_normalizer["normalizer"] = {{"type", "NFC"}};
  EXPECT_NE(LoadError(with_normalizer).find("normalizer type 'NFC' is not supported"),
            std::string::npos);

  json bad_merge = MakeTokenizerJson({});
  bad_merge["model"]["merges"] = json::array({"a zz"});
  EXPECT_NE(LoadError(bad_merge).find("model.merges[0]"), std::string::npos);

  json bad_behavior = MakeTokenizerJson({});
  bad_behavior["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "Sideways"}},
        {{"type", "ByteLevel"}}}}};
  EXPECT_NE(LoadError(bad_behavior).find("behavior 'Sideways'"), std::string::npos);

  EXPECT_NE(LoadError(MakeTokenizerJson({}), R"({"bos_token": "<s>"})")
                .find("tokenizer_config.json: bos_token '<s>' is not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(LoadError(MakeTokenizerJson({}), R"({"add_bos_token": "yes"})")
                .find("tokenizer_config.json: add_bos_token must be a boolean"),
            std::string::npos);
}

}  // namespace
}  // namespace mlaserve
