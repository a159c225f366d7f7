// The tokenizer: text <-> token ids for the served model. Loads a Hugging Face tokenizer.json
// (byte-level BPE: DeepSeek-V2/V3, the bundled model) or a tiktoken.model (Kimi-K2), plus
// tokenizer_config.json for BOS/EOS. See docs/tokenizer.md for the supported subset.
//
// Thread safety: a loaded Tokenizer is immutable; every const method may be called from many
// threads at once. It is move-only; anything holding a reference to it (StreamDecoder) must not
// outlive it or see it moved.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/types.h"

namespace mlaserve {

struct TokenizerModel;  // tokenizer/tokenizer_model.h

class Tokenizer {
 public:
  // Loads model_dir/tokenizer.json, or else model_dir/tiktoken.model (Kimi-K2), and, when
  // present, model_dir/tokenizer_config.json; or, when model_dir is a GGUF file, its
  // tokenizer.ggml.* (tokenizer/gguf_tokenizer.h). Errors are one line naming the file and problem.
  static Result<Tokenizer> FromDirectory(const std::string& model_dir);
  // The files FromDirectory may read: what a copy of the tokenizer elsewhere needs.
  static constexpr std::array<std::string_view, 3> kFileNames = {"tokenizer.json", "tiktoken.model",
                                                                 "tokenizer_config.json"};

  // The same from in-memory file contents; an empty config means "no tokenizer_config.json".
  static Result<Tokenizer> FromJsonText(std::string_view tokenizer_json,
                                        std::string_view tokenizer_config_json = {});

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Encodes `text`. Added tokens (special or not) written literally in the text map to their
  // ids. Ill-formed UTF-8 in `text` is replaced by U+FFFD before encoding (one per maximal
  // ill-formed subpart), so any byte string encodes. With add_bos and a known BOS token, the
  // BOS id comes first. Errors only on a regex engine failure (e.g. its match limit).
  Result<std::vector<TokenId>> Encode(std::string_view text, bool add_bos) const;

  // Concatenates the tokens' bytes and returns them as UTF-8, ill-formed parts replaced by
  // U+FFFD. Ids outside the vocabulary are skipped. Special tokens are spelled out unless
  // skip_special_tokens.
  std::string Decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;

  // The raw bytes `id` decodes to (may be part of a UTF-8 character); empty for unknown ids.
  // The view stays valid for the tokenizer's lifetime.
  std::string_view TokenBytes(TokenId id) const;

  // Lookups by the token's spelling in the vocabulary file ("Ġthe", "<｜User｜>").
  std::optional<TokenId> TokenToId(std::string_view token) const;
  std::string IdToToken(TokenId id) const;  // empty for unknown ids

  // One past the largest id (added tokens included).
  size_t vocab_size() const;
  std::optional<TokenId> bos_id() const;
  std::optional<TokenId> eos_id() const;
  // Whether callers should prepend BOS by default (tokenizer_config's add_bos_token).
  bool add_bos() const;
  bool IsSpecial(TokenId id) const;

 private:
  explicit Tokenizer(std::unique_ptr<const TokenizerModel> model);

  std::unique_ptr<const TokenizerModel> model_;  // never null in a constructed Tokenizer
};

}  // namespace mlaserve
