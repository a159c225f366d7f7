// A GGUF file's tokenizer (tokenizer.ggml.*, llama.cpp's layout) as the Hugging Face files it
// was converted from: tokenizer.json (byte-level BPE: tokens in id order, merges "a b", control
// and user-defined tokens as added tokens; the pre-tokenizer named by tokenizer.ggml.pre) and
// tokenizer_config.json (bos/eos/pad tokens, add_bos_token, tokenizer.chat_template).
// Tokenizer::FromDirectory and ChatTemplate::ForModel read a GGUF path through this.
// Pre-tokenizers known: gpt-2, deepseek-v3, kimi-k2 (tiktoken's pattern and whole-token rule;
// Kimi's long-text cuts, which tokenizer.json cannot say, as tokenizer_config.json's
// "mlaserve_long_text_cuts", read back by ApplyTokenizerConfig). Others
// (deepseek-llm, ...) are refused by name: give --tokenizer-path DIR with the model's own files.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/gguf.h"

namespace mlaserve {

struct HfTokenizerFiles {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
};
Result<HfTokenizerFiles> HfTokenizerFromGguf(const GgufFile& f, const std::string& source);
// tokenizer_config.json alone (special tokens, add_bos_token, the chat template): what a chat
// template needs, without building the vocabulary.
Result<std::string> HfTokenizerConfigFromGguf(const GgufFile& f, const std::string& source);
// Reads the file at `path` first.
Result<HfTokenizerFiles> ReadGgufTokenizer(const std::string& path);

// The tokenizer.ggml.pre name of a tokenizer.json pre_tokenizer, for a writer; nullopt when it
// is none of those above.
std::optional<std::string> GgufPreTokenizerName(const nlohmann::json& pre_tokenizer);

}  // namespace mlaserve
