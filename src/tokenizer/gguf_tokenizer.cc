#include "tokenizer/gguf_tokenizer.h"

#include "model/gguf_model.h"
#include "tokenizer/long_text_cuts.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

// GPT-2's split pattern (the bundled model's tokenizer uses it too).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

json Split(const std::string& regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}
json ByteLevel() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
}

json Gpt2PreTokenizer() { return {{"type", "Sequence"}, {"pretokenizers", {Split(kGpt2Pattern), ByteLevel()}}}; }

// DeepSeek-V3's published tokenizer.json pre_tokenizer (its patterns hold literal CR/LF).
json DeepSeekV3PreTokenizer() {
  const std::string rest = std::string(R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+)") +
                           "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
                           "| ?[\\p{P}\\p{S}]+[\r\n]*"
                           "|\\s*[\r\n]+"
                           "|\\s+(?!\\S)"
                           "|\\s+";
  return {{"type", "Sequence"},
          {"pretokenizers",
           {Split(R"(\p{N}{1,3})"), Split("[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"), Split(rest), ByteLevel()}}};
}

// Kimi-K2 (llama.cpp's "kimi-k2"): its tiktoken pattern, then bytes. The file's tokens are the
// tiktoken ranks spelled byte-level; its merges are one cut per token, derived from the ranks by
// the converter. Like tiktoken, a piece that is itself a token is that token (ignore_merges).
json KimiK2PreTokenizer() {
  return {{"type", "Sequence"}, {"pretokenizers", {Split(std::string(kKimiK2Pattern)), ByteLevel()}}};
}

}  // namespace

std::optional<std::string> GgufPreTokenizerName(const json& pre_tokenizer) {
  if (pre_tokenizer == Gpt2PreTokenizer()) return "gpt-2";
  if (pre_tokenizer == DeepSeekV3PreTokenizer()) return "deepseek-v3";
  return std::nullopt;
}

Result<HfTokenizerFiles> HfTokenizerFromGguf(const GgufFile& f, const std::string& source) {
  const std::string where = source + ": its tokenizer (give --tokenizer-path DIR to use another): ";
  auto model = f.Text("tokenizer.ggml.model");
  if (!model.ok()) return Status::Error(where + model.error());
  if (*model != "gpt2") return Status::Error(where + "tokenizer.ggml.model '" + *model + "' is not supported (gpt2)");
  const std::string pre = f.Text("tokenizer.ggml.pre").ok() ? *f.Text("tokenizer.ggml.pre") : "default";
  json pre_tokenizer;
  const bool kimi = pre == "kimi-k2";
  if (pre == "gpt-2") pre_tokenizer = Gpt2PreTokenizer();
  else if (pre == "deepseek-v3") pre_tokenizer = DeepSeekV3PreTokenizer();
  else if (kimi) pre_tokenizer = KimiK2PreTokenizer();
  else return Status::Error(where + "pre-tokenizer '" + pre + "' is not supported (gpt-2, deepseek-v3, kimi-k2)");
  const GgufValue* tokens = f.Find("tokenizer.ggml.tokens");
  const GgufValue* merges = f.Find("tokenizer.ggml.merges");
  if (tokens == nullptr || tokens->element_type != GgufValueType::kString || tokens->strings.size() != tokens->length) {
    return Status::Error(where + "tokenizer.ggml.tokens is missing or not a list of strings");
  }
  if (merges == nullptr || merges->element_type != GgufValueType::kString || merges->strings.size() != merges->length) {
    return Status::Error(where + "tokenizer.ggml.merges is missing or not a list of strings");
  }
  // Hugging Face's files are JSON: text that is not UTF-8 has no place in them (a real file's
  // tokens are byte-level symbols, always UTF-8).
  for (const std::vector<std::string>* list : {&tokens->strings, &merges->strings}) {
    for (size_t i = 0; i < list->size(); ++i) {
      if (!IsValidUtf8((*list)[i])) {
        return Status::Error(where + (list == &tokens->strings ? "token " : "merge ") + std::to_string(i) +
                             " is not valid UTF-8");
      }
    }
  }
  const GgufValue* types = f.Find("tokenizer.ggml.token_type");
  if (types != nullptr && types->integers.size() != tokens->strings.size()) {
    return Status::Error(where + "tokenizer.ggml.token_type does not have one entry per token");
  }
  json vocab = json::object(), added = json::array();
  for (size_t id = 0; id < tokens->strings.size(); ++id) {
    const std::string& token = tokens->strings[id];
    const int64_t type = types != nullptr ? types->integers[id] : 1;
    // 3: control, 4: user-defined: Hugging Face's added tokens (special for control ones).
    if (type == 3 || type == 4) {
      added.push_back({{"id", id}, {"content", token}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", type == 3}});
    }
    vocab[token] = id;
  }
  json tokenizer = {{"version", "1.0"},
                    {"added_tokens", added},
                    {"normalizer", nullptr},
                    {"pre_tokenizer", pre_tokenizer},
                    {"post_processor", nullptr},
                    {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
                                 {"use_regex", true}}},
                    {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                               {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                               {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", kimi},
                               {"vocab", vocab},
                               {"merges", merges->strings}}}};
  auto config = HfTokenizerConfigFromGguf(f, source);
  if (!config.ok()) return config.status();
  return HfTokenizerFiles{.tokenizer_json = tokenizer.dump(), .tokenizer_config_json = std::move(config).value()};
}

Result<std::string> HfTokenizerConfigFromGguf(const GgufFile& f, const std::string& source) {
  const GgufValue* tokens = f.Find("tokenizer.ggml.tokens");
  json config = json::object();
  auto token_of = [&](const char* key) -> std::optional<std::string> {
    const auto id = f.OptionalInteger(key);
    if (tokens == nullptr || !id || *id < 0 || size_t(*id) >= tokens->strings.size()) return std::nullopt;
    const std::string& token = tokens->strings[size_t(*id)];
    return IsValidUtf8(token) ? std::optional(token) : std::nullopt;
  };
  if (auto bos = token_of("tokenizer.ggml.bos_token_id")) config["bos_token"] = *bos;
  if (auto eos = token_of("tokenizer.ggml.eos_token_id")) config["eos_token"] = *eos;
  if (auto pad = token_of("tokenizer.ggml.padding_token_id")) config["pad_token"] = *pad;
  // Without the key, BOS is added, except for Kimi-K2 (its tokenizer class never adds one).
  const bool kimi = f.Text("tokenizer.ggml.pre").ok() && *f.Text("tokenizer.ggml.pre") == "kimi-k2";
  config["add_bos_token"] = f.OptionalInteger("tokenizer.ggml.add_bos_token").value_or(kimi ? 0 : 1) != 0;
  if (kimi) {  // read back by ApplyTokenizerConfig, here and in a batch client given these files
    config["mlaserve_long_text_cuts"] = {{"chunk_chars", kKimiLongTextCuts.chunk_chars},
                                         {"run_chars", kKimiLongTextCuts.run_chars}};
  }
  config["add_eos_token"] = f.OptionalInteger("tokenizer.ggml.add_eos_token").value_or(0) != 0;
  if (auto t = f.Text("tokenizer.chat_template"); t.ok()) {
    if (!IsValidUtf8(*t)) return Status::Error(source + ": tokenizer.chat_template is not valid UTF-8");
    config["chat_template"] = *t;
  }
  return config.dump();
}

Result<HfTokenizerFiles> ReadGgufTokenizer(const std::string& path) {
  auto f = ReadGgufFile(path);
  if (!f.ok()) return f.status();
  return HfTokenizerFromGguf(*f, path);
}

}  // namespace mlaserve
