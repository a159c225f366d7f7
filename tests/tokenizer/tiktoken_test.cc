// Kimi-K2 style directories: tiktoken.model + tokenizer_config.json.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/base64.h"
#include "tokenizer/long_text_cuts.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_model.h"

namespace mlaserve {
namespace {

using testing::Base64;

// Ranks 0..255 are the bytes; then "ab", "abc", "ab" + "ab", " x" (ranks 256..259).
std::string TiktokenModel() {
  std::string text;
  TokenId rank = 0;
  for (int byte = 0; byte < 256; ++byte) {
    text += Base64(std::string(1, static_cast<char>(byte))) + " " + std::to_string(rank++) + "\n";
  }
  for (const char* token : {"ab", "abc", "abab", " x"}) {
    text += Base64(token) + " " + std::to_string(rank++) + "\n";
  }
  return text;
}

constexpr TokenId kFirstSpecial = 260;

const char* kConfig = R"({
  "bos_token": "[BOS]",
  "eos_token": "[EOS]",
  "added_tokens_decoder": {
    "260": {"content": "[BOS]", "special": true},
    "261": {"content": "[EOS]", "special": true},
    "263": {"content": "<|im_end|>", "special": true}
  }
})";

std::vector<TokenId> EncodeOrDie(const Tokenizer& tokenizer, std::string_view text) {
  Result<std::vector<TokenId>> ids = tokenizer.Encode(text, /*add_bos=*/false);
  EXPECT_TRUE(ids.ok()) << ids.error();
  return ids.ok() ? std::move(ids).value() : std::vector<TokenId>{};
}

// The texts' encodings, each encoded on its own, concatenated: what a cut between them gives.
std::vector<TokenId> EncodeEachAlone(const Tokenizer& tokenizer, std::initializer_list<std::string_view> texts) {
  std::vector<TokenId> ids;
  for (std::string_view text : texts) {
    const std::vector<TokenId> part = EncodeOrDie(tokenizer, text);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

class TokenizerTiktoken : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("mlaserve_tiktoken_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "tiktoken.model") << TiktokenModel();
    std::ofstream(dir_ / "tokenizer_config.json") << kConfig;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
};

TEST_F(TokenizerTiktoken, LoadsRanksAndSpecialTokens) {
  Result<Tokenizer> tokenizer = Tokenizer::FromDirectory(dir_.string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  EXPECT_EQ(tokenizer->vocab_size(), 260u + 256u);
  EXPECT_EQ(tokenizer->bos_id(), kFirstSpecial);
  EXPECT_EQ(tokenizer->eos_id(), kFirstSpecial + 1);
  EXPECT_FALSE(tokenizer->add_bos());  // Kimi's tokenizer class never prepends BOS
  EXPECT_EQ(tokenizer->IdToToken(kFirstSpecial + 3), "<|im_end|>");
  EXPECT_EQ(tokenizer->IdToToken(kFirstSpecial + 2), "<|reserved_token_262|>");
  EXPECT_EQ(tokenizer->IdToToken(259), "Ġx");  // byte-level spelling of the ranks' bytes
  EXPECT_TRUE(tokenizer->IsSpecial(kFirstSpecial + 2));

  Result<std::vector<TokenId>> ids = tokenizer->Encode("[BOS]abab ab abc abcab x<|im_end|>", false);
  ASSERT_TRUE(ids.ok()) << ids.error();
  // Pieces: "abab" (a whole token), " ab", " abc", " abcab", " x" (a whole token). In
  // " abcab" both "ab" merge (rank 256) before "abc" (257) forms; "abcab" is no token.
  EXPECT_EQ(ids.value(), (std::vector<TokenId>{kFirstSpecial, 258, ' ', 256, ' ', 257, ' ', 257,
                                               256, 259, kFirstSpecial + 3}));
  EXPECT_EQ(tokenizer->Decode(ids.value()), "[BOS]abab ab abc abcab x<|im_end|>");
}

TEST_F(TokenizerTiktoken, KimiPatternSplits) {
  std::ifstream model_file(dir_ / "tiktoken.model");
  const std::string model_text((std::istreambuf_iterator<char>(model_file)),
                               std::istreambuf_iterator<char>());
  Result<std::unique_ptr<TokenizerModel>> model =
      ParseKimiTiktoken(model_text, "tiktoken.model", kConfig, "tokenizer_config.json");
  ASSERT_TRUE(model.ok()) << model.error();
  auto pieces = [&](std::string_view text) {
    PreTokenizeScratch scratch;
    std::vector<std::string_view> views;
    EXPECT_TRUE(model.value()->pre_tokenizer.Split(text, &scratch, &views).ok());
    return std::vector<std::string>(views.begin(), views.end());
  };
  using Strings = std::vector<std::string>;
  // Expected pieces from the original pattern under Python's `regex` module (V1 syntax).
  EXPECT_EQ(pieces("HelloWorld's 中文abc"), (Strings{"Hello", "World's", " ", "中文", "abc"}));
  EXPECT_EQ(pieces("ABCdef GHI'S 12345 ...\n\n  x"),
            (Strings{"ABCdef", " GHI'S", " ", "123", "45", " ...\n\n", " ", " x"}));
  EXPECT_EQ(pieces("日本語のテキスト、カタカナ"), (Strings{"日本語", "のテキスト", "、カタカナ"}));
}

TEST_F(TokenizerTiktoken, ErrorsNameTheFile) {
  std::ofstream(dir_ / "tiktoken.model") << "not-base64! 1\n";
  Result<Tokenizer> tokenizer = Tokenizer::FromDirectory(dir_.string());
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.error().find("tiktoken.model: line 1"), std::string::npos)
      << tokenizer.error();

  std::filesystem::remove(dir_ / "tokenizer_config.json");
  std::ofstream(dir_ / "tiktoken.model") << TiktokenModel();
  tokenizer = Tokenizer::FromDirectory(dir_.string());
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.error().find("tokenizer_config.json: missing"), std::string::npos)
      << tokenizer.error();
}

// Kimi cuts runs of more than 25,000 non-whitespace (or whitespace) characters before its
// pattern, so a long run encodes as its 25,000-character parts do (issue 12, item 5).
TEST_F(TokenizerTiktoken, RunsPast25000CharactersAreCutAsKimiDoes) {
  Result<Tokenizer> tokenizer = Tokenizer::FromDirectory(dir_.string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  std::string run = "b";
  while (run.size() < 25003) run += "ab";  // 25,003 letters: "ab" pairs end up aligned differently
  const std::string first = run.substr(0, 25000), rest = run.substr(25000);
  EXPECT_EQ(EncodeOrDie(*tokenizer, run), EncodeEachAlone(*tokenizer, {first, rest}));
  // Whitespace resets the count; a run of exactly 25,000 is not cut.
  std::vector<std::string_view> parts_of;
  const std::string two_runs = std::string(25000, 'x') + " " + std::string(25000, 'y');
  CutLongText(two_runs, {.run_chars = 25000}, &parts_of);
  EXPECT_EQ(parts_of.size(), 1u);
  const std::string long_run(25001, 'x');
  CutLongText(long_run, {.run_chars = 25000}, &parts_of);
  ASSERT_EQ(parts_of.size(), 2u);
  EXPECT_EQ(parts_of[0].size(), 25000u);
  // Characters, not bytes: 25,001 two-byte letters are cut after 25,000 of them.
  std::string wide;
  for (int i = 0; i < 25001; ++i) wide += "\xC3\xA9";  // U+00E9
  CutLongText(wide, {.run_chars = 25000}, &parts_of);
  ASSERT_EQ(parts_of.size(), 2u);
  EXPECT_EQ(parts_of[1], "\xC3\xA9");
}

// Kimi also cuts its input every 400,000 characters (before the 25,000 run cut) and tokenizes
// each chunk alone, so a token straddling character 400,000 splits there (issue 12, item 5).
TEST_F(TokenizerTiktoken, TextPast400000CharactersIsCutIntoChunksAsKimiDoes) {
  Result<Tokenizer> tokenizer = Tokenizer::FromDirectory(dir_.string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  // "é" then 200,000 " x": 400,001 characters in 400,002 bytes. Character 400,000 is the last
  // "x", so the cut falls inside the last " x" (a cut at byte 400,000 would fall before it).
  std::string first_chunk = "\xC3\xA9";
  for (int i = 0; i < 199'999; ++i) first_chunk += " x";
  first_chunk += " ";
  const std::string second_chunk = "x";
  const std::string text = first_chunk + second_chunk;

  const std::vector<TokenId> whole = EncodeOrDie(*tokenizer, text);
  EXPECT_EQ(whole, EncodeEachAlone(*tokenizer, {first_chunk, second_chunk}));

  // Uncut, every " x" would be token 259: the last one is " " and "x" only because of the cut.
  std::vector<TokenId> uncut = {0xC3, 0xA9};
  uncut.insert(uncut.end(), 200'000, 259);
  EXPECT_NE(whole, uncut);
  ASSERT_EQ(whole.size(), uncut.size() + 1);
  EXPECT_EQ(std::vector<TokenId>(whole.end() - 3, whole.end()), (std::vector<TokenId>{259, ' ', 'x'}));
  EXPECT_EQ(tokenizer->Decode(whole), text);
}

}  // namespace
}  // namespace mlaserve
