// Builders for small tokenizer.json documents used across the tokenizer tests, so each test
// states only the merges, pre-tokenizer and added tokens it is about.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve::testing {

// A merge written in plain text: ("t", "h") merges the bytes of "t" and "h".
using TextMerge = std::pair<std::string, std::string>;

inline std::string Spell(std::string_view raw) {
  std::string spelling;
  AppendByteLevelSpelling(raw, &spelling);
  return spelling;
}

struct TokenizerJsonSpec {
  std::vector<TextMerge> merges;
  nlohmann::json pre_tokenizer = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  nlohmann::json added_tokens = nlohmann::json::array();
  bool merges_as_pairs = false;  // [["a","b"]] instead of ["a b"]
};

// Vocab: ids 0..255 are the single bytes (id == byte value), then one id per merge, in order.
inline nlohmann::json MakeTokenizerJson(const TokenizerJsonSpec& spec) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int byte = 0; byte < 256; ++byte) {
    vocab[Spell(std::string(1, static_cast<char>(byte)))] = byte;
  }
  nlohmann::json merges = nlohmann::json::array();
  int next_id = 256;
  for (const auto& [left, right] : spec.merges) {
    const std::string merged = Spell(left + right);
    if (!vocab.contains(merged)) vocab[merged] = next_id++;
    if (spec.merges_as_pairs) {
      merges.push_back({Spell(left), Spell(right)});
    } else {
      merges.push_back(Spell(left) + " " + Spell(right));
    }
  }
  return {
      {"version", "1.0"},
      {"added_tokens", spec.added_tokens},
      {"normalizer", nullptr},
      {"pre_tokenizer", spec.pre_tokenizer},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
  };
}

inline nlohmann::json AddedTokenJson(int id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

inline Tokenizer LoadOrDie(const nlohmann::json& tokenizer_json, const std::string& config = {}) {
  Result<Tokenizer> tokenizer = Tokenizer::FromJsonText(tokenizer_json.dump(), config);
  if (!tokenizer.ok()) ADD_FAILURE() << tokenizer.error();
  return std::move(tokenizer).value();
}

// Each token of `text` as the text it decodes to: {"th", "e", " cat"}.
inline std::vector<std::string> TokenTexts(const Tokenizer& tokenizer, std::string_view text) {
  Result<std::vector<TokenId>> ids = tokenizer.Encode(text, /*add_bos=*/false);
  EXPECT_TRUE(ids.ok()) << ids.error();
  std::vector<std::string> texts;
  if (!ids.ok()) return texts;
  for (TokenId id : ids.value()) texts.push_back(std::string(tokenizer.TokenBytes(id)));
  return texts;
}

}  // namespace mlaserve::testing
