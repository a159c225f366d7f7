// Tokenizer: file discovery, and the encode pipeline
// (added tokens -> pre-tokenizer -> BPE per piece) and decode over a loaded TokenizerModel.
#include "tokenizer/tokenizer.h"

#include "model/gguf_model.h"
#include "tokenizer/gguf_tokenizer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/long_text_cuts.h"
#include "tokenizer/tokenizer_model.h"
#include "tokenizer/utf8.h"

namespace mlaserve {
namespace {

bool FileExists(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error);
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) return Status::Error(path + ": read failed");
  return std::move(contents).str();
}

Result<std::unique_ptr<TokenizerModel>> LoadModel(const std::string& model_dir) {
  const std::string json_path = model_dir + "/tokenizer.json";
  const std::string tiktoken_path = model_dir + "/tiktoken.model";
  const std::string config_path = model_dir + "/tokenizer_config.json";
  const bool has_config = FileExists(config_path);
  std::string config_text;
  if (has_config) {
    Result<std::string> text = ReadFile(config_path);
    if (!text.ok()) return text.status();
    config_text = std::move(text).value();
  }

  if (FileExists(tiktoken_path) && !FileExists(json_path)) {
    Result<std::string> model_text = ReadFile(tiktoken_path);
    if (!model_text.ok()) return model_text.status();
    if (!has_config) {
      return Status::Error(config_path +
                           ": missing (a tiktoken.model needs it for special tokens)");
    }
    Result<std::unique_ptr<TokenizerModel>> model =
        ParseKimiTiktoken(model_text.value(), tiktoken_path, config_text, config_path);
    if (!model.ok()) return model.status();
    MLA_RETURN_IF_ERROR(ApplyTokenizerConfig(config_text, config_path,
                                             /*add_bos_by_default=*/false, model->get()));
    return model;
  }

  if (!FileExists(json_path)) {
    return Status::Error(json_path + ": missing (and no tiktoken.model either)");
  }
  Result<std::string> json_text = ReadFile(json_path);
  if (!json_text.ok()) return json_text.status();
  Result<std::unique_ptr<TokenizerModel>> model =
      ParseHfTokenizerJson(json_text.value(), json_path);
  if (!model.ok()) return model.status();
  if (has_config) {
    MLA_RETURN_IF_ERROR(ApplyTokenizerConfig(config_text, config_path,
                                             /*add_bos_by_default=*/true, model->get()));
  }
  return model;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<const TokenizerModel> model) : model_(std::move(model)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::FromDirectory(const std::string& model_dir) {
  if (IsGgufFile(model_dir)) {
    auto files = ReadGgufTokenizer(model_dir);
    if (!files.ok()) return files.status();
    return FromJsonText(files->tokenizer_json, files->tokenizer_config_json);
  }
  Result<std::unique_ptr<TokenizerModel>> model = LoadModel(model_dir);
  if (!model.ok()) return model.status();
  return Tokenizer(std::move(model).value());
}

Result<Tokenizer> Tokenizer::FromJsonText(std::string_view tokenizer_json,
                                          std::string_view tokenizer_config_json) {
  Result<std::unique_ptr<TokenizerModel>> model =
      ParseHfTokenizerJson(tokenizer_json, "tokenizer.json");
  if (!model.ok()) return model.status();
  if (!tokenizer_config_json.empty()) {
    MLA_RETURN_IF_ERROR(ApplyTokenizerConfig(tokenizer_config_json, "tokenizer_config.json",
                                             /*add_bos_by_default=*/true, model->get()));
  }
  return Tokenizer(std::move(model).value());
}

Result<std::vector<TokenId>> Tokenizer::Encode(std::string_view text, bool add_bos) const {
  const TokenizerModel& model = *model_;
  std::string repaired;
  if (!IsValidUtf8(text)) {
    AppendUtf8Lossy(text, &repaired);
    text = repaired;
  }

  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 2);  // ~4 bytes per token in English; grows if needed
  if (add_bos && model.bos_id) ids.push_back(*model.bos_id);

  // Working memory for the whole call, reused for every segment and piece.
  std::vector<TextSegment> segments;
  PreTokenizeScratch pre_scratch;
  std::vector<std::string_view> pieces;
  std::vector<std::string_view> parts;  // [1] unless the model cuts long text (Kimi)
  BpeScratch bpe_scratch;

  model.added_tokens.Split(text, &segments);
  for (const TextSegment& segment : segments) {
    if (segment.added_token >= 0) {
      ids.push_back(segment.added_token);
      continue;
    }
    const std::string_view segment_text = text.substr(segment.begin, segment.end - segment.begin);
    // Cut per segment, as Kimi's class does on transformers' path (tokenize splits on added
    // tokens, then _tokenize -> encode cuts each piece); docs/tokenizer.md says where a bare
    // encode(text) differs.
    CutLongText(segment_text, model.long_text_cuts, &parts);
    for (std::string_view part : parts) {
      MLA_RETURN_IF_ERROR(model.pre_tokenizer.Split(part, &pre_scratch, &pieces));
      for (std::string_view piece : pieces) model.bpe.EncodePiece(piece, &bpe_scratch, &ids);
    }
  }
  return ids;
}

std::string Tokenizer::Decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (TokenId id : ids) {
    if (skip_special_tokens && IsSpecial(id)) continue;
    bytes.append(TokenBytes(id));
  }
  if (IsValidUtf8(bytes)) return bytes;
  std::string text;
  AppendUtf8Lossy(bytes, &text);
  return text;
}

std::string_view Tokenizer::TokenBytes(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= model_->vocab_size()) return {};
  return model_->bytes[static_cast<size_t>(id)];
}

std::optional<TokenId> Tokenizer::TokenToId(std::string_view token) const {
  auto it = model_->id_by_spelling.find(token);
  if (it == model_->id_by_spelling.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::IdToToken(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= model_->vocab_size()) return {};
  return model_->spellings[static_cast<size_t>(id)];
}

size_t Tokenizer::vocab_size() const { return model_->vocab_size(); }
std::optional<TokenId> Tokenizer::bos_id() const { return model_->bos_id; }
std::optional<TokenId> Tokenizer::eos_id() const { return model_->eos_id; }
bool Tokenizer::add_bos() const { return model_->add_bos; }

bool Tokenizer::IsSpecial(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= model_->vocab_size()) return false;
  return model_->is_special[static_cast<size_t>(id)] != 0;
}

}  // namespace mlaserve
