// Streaming decode: characters split across tokens are held back until complete, and the
// streamed text always equals the whole-sequence Decode.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace mlaserve {
namespace {

using testing::LoadOrDie;
using testing::MakeTokenizerJson;
using testing::TokenizerJsonSpec;

// Pushes every id, checking each chunk is whole UTF-8; returns all chunks + Flush.
std::string StreamAll(const Tokenizer& tokenizer, const std::vector<TokenId>& ids,
                      bool skip_special = false, std::vector<std::string>* chunks = nullptr) {
  StreamDecoder decoder(tokenizer, skip_special);
  std::string text;
  for (TokenId id : ids) {
    std::string chunk = decoder.Push(id);
    EXPECT_TRUE(IsValidUtf8(chunk));
    if (chunks) chunks->push_back(chunk);
    text += chunk;
  }
  text += decoder.Flush();
  EXPECT_EQ(decoder.pending_bytes(), 0u);
  return text;
}

// Tokens that end mid-character: "a" + the first byte of "中", then its last two bytes.
Tokenizer SplittingTokenizer() {
  TokenizerJsonSpec spec;
  spec.merges = {{"a", "\xE4"}, {"\xB8", "\xAD"}, {"\xF0", "\x9F"}, {"\x98", "\x80"}};
  spec.added_tokens = nlohmann::json::array({testing::AddedTokenJson(900, "<|end|>", true)});
  return LoadOrDie(MakeTokenizerJson(spec));
}

TEST(TokenizerStreamDecoder, HoldsBackSplitCharacters) {
  const Tokenizer tokenizer = SplittingTokenizer();
  Result<std::vector<TokenId>> ids = tokenizer.Encode("a中", false);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 2u);  // "a\xE4", "\xB8\xAD"
  std::vector<std::string> chunks;
  EXPECT_EQ(StreamAll(tokenizer, ids.value(), false, &chunks), "a中");
  EXPECT_EQ(chunks, (std::vector<std::string>{"a", "中"}));

  Result<std::vector<TokenId>> emoji = tokenizer.Encode("😀", false);
  ASSERT_TRUE(emoji.ok());
  ASSERT_EQ(emoji->size(), 2u);
  chunks.clear();
  EXPECT_EQ(StreamAll(tokenizer, emoji.value(), false, &chunks), "😀");
  EXPECT_EQ(chunks, (std::vector<std::string>{"", "😀"}));
}

TEST(TokenizerStreamDecoder, EqualsWholeDecode) {
  const Tokenizer tokenizer = SplittingTokenizer();
  for (const std::string text : {"a中a中 中文字符测试", "emoji 😀😀👑🎭 end", "Ünïcödé 𝄞<|end|>x",
                                 "日本語のテキスト", "한국어 문장", ""}) {
    Result<std::vector<TokenId>> ids = tokenizer.Encode(text, false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(StreamAll(tokenizer, ids.value()), text);
    EXPECT_EQ(StreamAll(tokenizer, ids.value(), /*skip_special=*/true),
              tokenizer.Decode(ids.value(), /*skip_special_tokens=*/true));
  }
}

TEST(TokenizerStreamDecoder, InvalidBytesMatchDecode) {
  const Tokenizer tokenizer = LoadOrDie(MakeTokenizerJson({}));
  // Byte tokens: stray continuation, cut-off 3-byte char then ASCII, truncated tail.
  const std::vector<TokenId> ids = {'x', 0x80, 0xE4, 0xB8, 'y', 0xF0, 0x9F, 0x98};
  const std::string whole = tokenizer.Decode(ids);
  EXPECT_EQ(whole, "x\uFFFD\uFFFDy\uFFFD");
  EXPECT_EQ(StreamAll(tokenizer, ids), whole);
}

TEST(TokenizerStreamDecoder, RandomByteSequencesMatchDecode) {
  const Tokenizer tokenizer = SplittingTokenizer();
  std::mt19937 rng(7);
  // Bytes biased toward UTF-8 lead and continuation bytes so sequences are often valid.
  const std::vector<TokenId> pool = {'a',  ' ',  0xE4, 0xB8, 0xAD, 0xF0, 0x9F, 0x98, 0x80,
                                     0xC3, 0xA9, 0xFF, 256,  257,  258,  259,  900};
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<TokenId> ids(rng() % 12);
    for (TokenId& id : ids) id = pool[rng() % pool.size()];
    ASSERT_EQ(StreamAll(tokenizer, ids), tokenizer.Decode(ids)) << "trial " << trial;
  }
}

TEST(TokenizerStreamDecoder, FlushResetsForTheNextSequence) {
  const Tokenizer tokenizer = LoadOrDie(MakeTokenizerJson({}));
  StreamDecoder decoder(tokenizer);
  EXPECT_EQ(decoder.Push(0xE4), "");
  EXPECT_EQ(decoder.pending_bytes(), 1u);
  EXPECT_EQ(decoder.Flush(), "\uFFFD");
  EXPECT_EQ(decoder.Push('o'), "o");
  EXPECT_EQ(decoder.Push(-1), "");  // unknown ids decode to nothing, as in Decode
  EXPECT_EQ(decoder.Flush(), "");
}

}  // namespace
}  // namespace mlaserve
