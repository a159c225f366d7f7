// Loads a tiktoken BPE file ("base64-bytes rank" per line) the way Kimi-K2's
// tokenization_kimi.py uses it: ranks are token ids, 256 special ids follow them (named by
// tokenizer_config.json's added_tokens_decoder, else "<|reserved_token_N|>"), and Kimi's
// pre-tokenizer pattern splits the text.
//
// tiktoken has no merges list: two adjacent parts merge when their concatenation is a token,
// lowest rank first. That is ordinary BPE with the merge table "(a, b) -> a+b, rank = id(a+b)"
// for every way of cutting every token in two, which is what is built here.
#include <array>
#include <charconv>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/tokenizer_model.h"

namespace mlaserve {
namespace {

constexpr int kNumReservedSpecialTokens = 256;

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard alphabet, '=' padding optional. Returns false on any other character.
bool DecodeBase64(std::string_view text, std::string* out) {
  out->clear();
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    const int value = Base64Value(c);
    if (value < 0) return false;
    buffer = (buffer << 6) | static_cast<uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  return true;
}

// Reads the special-token names; ids the decoder does not list keep Kimi's reserved names.
Status ReadSpecialTokens(std::string_view config_text, const std::string& config_source,
                         TokenId first_special_id, std::vector<AddedToken>* tokens) {
  Result<nlohmann::json> config = ParseJsonText(config_text, config_source);
  if (!config.ok()) return config.status();
  if (!config->is_object()) return Status::Error(config_source + ": top level must be an object");
  const auto decoder = config->find("added_tokens_decoder");
  const bool has_decoder = decoder != config->end() && decoder->is_object();

  for (TokenId id = first_special_id; id < first_special_id + kNumReservedSpecialTokens; ++id) {
    AddedToken token{
        .content = "<|reserved_token_" + std::to_string(id) + "|>", .id = id, .special = true};
    if (has_decoder) {
      auto entry = decoder->find(std::to_string(id));
      if (entry != decoder->end()) {
        const std::string where = config_source + ": added_tokens_decoder." + std::to_string(id);
        if (!entry->is_object()) return Status::Error(where + " must be an object");
        std::optional<std::string> content;
        MLA_RETURN_IF_ERROR(ReadOptionalString(*entry, "content", where, &content));
        if (!content || content->empty()) {
          return Status::Error(where + ".content must be non-empty");
        }
        token.content = std::move(*content);
      }
    }
    tokens->push_back(std::move(token));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<TokenizerModel>> ParseKimiTiktoken(std::string_view model_text,
                                                          const std::string& model_source,
                                                          std::string_view config_text,
                                                          const std::string& config_source) {
  auto model = std::make_unique<TokenizerModel>();
  TokenIdByBytes id_by_bytes;
  std::string token_bytes;
  std::string spelling;
  size_t line_number = 0;
  size_t num_ranks = 0;
  while (!model_text.empty()) {
    const size_t newline = model_text.find('\n');
    std::string_view line = model_text.substr(0, newline);
    model_text.remove_prefix(newline == std::string_view::npos ? model_text.size() : newline + 1);
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;

    const std::string where = model_source + ": line " + std::to_string(line_number);
    const size_t space = line.find(' ');
    TokenId rank = -1;
    const std::string_view rank_text =
        space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
    const auto parsed =
        std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (space == std::string_view::npos || parsed.ec != std::errc() ||
        parsed.ptr != rank_text.data() + rank_text.size() || rank < 0 || rank >= (1 << 24)) {
      return Status::Error(where + " is not \"base64-bytes rank\"");
    }
    if (!DecodeBase64(line.substr(0, space), &token_bytes) || token_bytes.empty()) {
      return Status::Error(where + " has invalid base64");
    }
    spelling.clear();
    AppendByteLevelSpelling(token_bytes, &spelling);
    model->SetToken(rank, spelling, token_bytes);
    id_by_bytes.insert_or_assign(token_bytes, rank);
    ++num_ranks;
  }
  if (num_ranks == 0) return Status::Error(model_source + ": no tokens");

  std::array<TokenId, 256> byte_token_ids;
  byte_token_ids.fill(-1);
  std::unordered_map<uint64_t, MergeRule> merges;
  for (const auto& [bytes, id] : id_by_bytes) {
    if (bytes.size() == 1) {
      byte_token_ids[static_cast<unsigned char>(bytes[0])] = id;
      continue;
    }
    const std::string_view whole = bytes;
    for (size_t cut = 1; cut < whole.size(); ++cut) {
      auto left = id_by_bytes.find(whole.substr(0, cut));
      if (left == id_by_bytes.end()) continue;
      auto right = id_by_bytes.find(whole.substr(cut));
      if (right == id_by_bytes.end()) continue;
      merges.insert_or_assign(BpeModel::PairKey(left->second, right->second),
                              MergeRule{.rank = id, .merged = id});
    }
  }

  // Kimi numbers its special tokens right after the ranks.
  std::vector<AddedToken> specials;
  MLA_RETURN_IF_ERROR(
      ReadSpecialTokens(config_text, config_source, static_cast<TokenId>(num_ranks), &specials));
  model->SetAddedTokens(std::move(specials));

  Result<Regex> pattern = Regex::Compile(kKimiK2Pattern);
  if (!pattern.ok()) return Status::Error(model_source + ": " + pattern.error());
  std::vector<PreTokenizerStep> steps;
  steps.emplace_back(SplitStep{.pattern = std::move(pattern).value(),
                               .behavior = SplitBehavior::kIsolated,
                               .invert = false});
  model->pre_tokenizer = PreTokenizer(std::move(steps), nullptr);
  model->long_text_cuts = kKimiLongTextCuts;
  // tiktoken emits a piece that is itself a token without running merges.
  model->bpe = BpeModel(byte_token_ids, std::move(merges), std::move(id_by_bytes),
                        BpeOptions{.ignore_merges = true});
  return model;
}

}  // namespace mlaserve
