// The bundled model's tokenizer against the Python reference encoder's output
// (tests/fixtures/tokenizer_cases.json, written by tools/train/make_fixtures.py).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {
namespace {

const std::string kModelDir = MLASERVE_SOURCE_DIR "/models/shakespeare-mla";
const std::string kCasesPath = MLASERVE_SOURCE_DIR "/tests/fixtures/tokenizer_cases.json";

std::string ReadAll(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

class TokenizerBundled : public ::testing::Test {
 protected:
  void SetUp() override {
    // Both are in the repository: a missing one is a failure, not a reason to skip.
    ASSERT_TRUE(std::filesystem::exists(kModelDir + "/tokenizer.json")) << kModelDir << "/tokenizer.json is missing";
    ASSERT_TRUE(std::filesystem::exists(kCasesPath)) << kCasesPath << " is missing";
    Result<Tokenizer> loaded = Tokenizer::FromDirectory(kModelDir);
    ASSERT_TRUE(loaded.ok()) << loaded.error();
    tokenizer_ = std::make_unique<Tokenizer>(std::move(loaded).value());
  }

  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(TokenizerBundled, MatchesReferenceEncoderExactly) {
  const nlohmann::json cases = nlohmann::json::parse(ReadAll(kCasesPath));
  ASSERT_TRUE(cases.is_array());
  ASSERT_FALSE(cases.empty());
  for (const nlohmann::json& entry : cases) {
    const std::string text = entry.at("text").get<std::string>();
    const std::vector<TokenId> expected = entry.at("ids").get<std::vector<TokenId>>();
    Result<std::vector<TokenId>> ids = tokenizer_->Encode(text, /*add_bos=*/false);
    ASSERT_TRUE(ids.ok()) << ids.error();
    EXPECT_EQ(ids.value(), expected) << "text: " << text;
    EXPECT_EQ(tokenizer_->Decode(ids.value()), text);

    StreamDecoder stream(*tokenizer_);
    std::string streamed;
    for (TokenId id : ids.value()) streamed += stream.Push(id);
    streamed += stream.Flush();
    EXPECT_EQ(streamed, text);
  }
}

TEST_F(TokenizerBundled, SpecialTokensAndChatPrompt) {
  ASSERT_TRUE(tokenizer_->bos_id().has_value());
  ASSERT_TRUE(tokenizer_->eos_id().has_value());
  EXPECT_EQ(tokenizer_->IdToToken(*tokenizer_->bos_id()), "<|bos|>");
  EXPECT_EQ(tokenizer_->IdToToken(*tokenizer_->eos_id()), "<|eos|>");
  EXPECT_TRUE(tokenizer_->add_bos());
  EXPECT_TRUE(tokenizer_->IsSpecial(*tokenizer_->bos_id()));

  const std::vector<ChatMessage> messages = {{"user", "Speak, friend."}};
  Result<std::string> prompt = ApplyChatTemplate(ChatFormat::kMlaserve, messages, true);
  ASSERT_TRUE(prompt.ok());
  Result<std::vector<TokenId>> ids = tokenizer_->Encode(prompt.value(), /*add_bos=*/false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), *tokenizer_->bos_id());
  EXPECT_EQ(ids->at(1), tokenizer_->TokenToId("<|user|>").value());
  EXPECT_EQ(ids->back(), tokenizer_->TokenToId("<|assistant|>").value());
  EXPECT_EQ(tokenizer_->Decode(ids.value()), prompt.value());
  EXPECT_EQ(tokenizer_->Decode(ids.value(), /*skip_special_tokens=*/true), "Speak, friend.");
}

// A prompt the size of a long context encodes in well under a second per 100K tokens.
TEST_F(TokenizerBundled, LongTextRoundTripsQuickly) {
  const std::string heldout_path = kModelDir + "/heldout.txt";
  if (!std::filesystem::exists(heldout_path)) GTEST_SKIP() << "no heldout.txt";
  const std::string heldout = ReadAll(heldout_path);
  std::string text;
  while (text.size() < 400000) text += heldout;

  const auto start = std::chrono::steady_clock::now();
  Result<std::vector<TokenId>> ids = tokenizer_->Encode(text, false);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(ids.ok()) << ids.error();
  EXPECT_EQ(tokenizer_->Decode(ids.value()), text);
  EXPECT_GT(ids->size(), 50000u);
  EXPECT_LT(seconds, 5.0) << ids->size() << " tokens took " << seconds << " s";
  std::cout << "[          ] encoded " << text.size() << " bytes -> " << ids->size()
            << " tokens in " << seconds * 1000 << " ms\n";
}

}  // namespace
}  // namespace mlaserve
