// tokenizer_config.json: which tokens are BOS / EOS and whether BOS is prepended by default.
#include "tokenizer/json_fields.h"
#include "tokenizer/tokenizer_model.h"

namespace mlaserve {
namespace {

// bos_token / eos_token are a string, {"content": "..."} (an AddedToken dump), or null.
Status ResolveToken(const nlohmann::json& root, std::string_view key, const std::string& source,
                    const TokenizerModel& model, std::optional<TokenId>* out) {
  out->reset();
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return Status::Ok();
  const std::string where = source + ": " + std::string(key);
  std::optional<std::string> name;
  if (it->is_string()) {
    name = it->get<std::string>();
  } else if (it->is_object()) {
    MLA_RETURN_IF_ERROR(ReadOptionalString(*it, "content", where, &name));
  }
  if (!name) return Status::Error(where + " must be a string or {\"content\": ...}");
  auto id = model.id_by_spelling.find(std::string_view(*name));
  if (id == model.id_by_spelling.end()) {
    return Status::Error(where + " '" + *name + "' is not in the vocabulary");
  }
  *out = id->second;
  return Status::Ok();
}

}  // namespace

Status ApplyTokenizerConfig(std::string_view json_text, const std::string& source,
                            bool add_bos_by_default, TokenizerModel* model) {
  Result<nlohmann::json> root = ParseJsonText(json_text, source);
  if (!root.ok()) return root.status();
  if (!root->is_object()) return Status::Error(source + ": top level must be an object");
  MLA_RETURN_IF_ERROR(ResolveToken(*root, "bos_token", source, *model, &model->bos_id));
  MLA_RETURN_IF_ERROR(ResolveToken(*root, "eos_token", source, *model, &model->eos_id));
  MLA_RETURN_IF_ERROR(ReadOptionalBool(*root, "add_bos_token", source + ": ",
                                       add_bos_by_default && model->bos_id.has_value(),
                                       &model->add_bos));
  // add_bos_token without a bos_token has nothing to add; such configs exist, so no error.
  if (!model->bos_id) model->add_bos = false;
  // mlaserve's own key, in the tokenizer_config.json a kimi-k2 GGUF stands for (gguf_tokenizer.h):
  // Kimi's long-text cuts, which tokenizer.json cannot say.
  if (auto it = root->find("mlaserve_long_text_cuts"); it != root->end()) {
    const nlohmann::json& cuts = *it;
    if (!cuts.is_object() || !cuts.value("chunk_chars", nlohmann::json()).is_number_unsigned() ||
        !cuts.value("run_chars", nlohmann::json()).is_number_unsigned()) {
      return Status::Error(source + ": mlaserve_long_text_cuts must be {\"chunk_chars\": N, \"run_chars\": N}");
    }
    model->long_text_cuts = LongTextCuts{.chunk_chars = cuts["chunk_chars"].get<size_t>(),
                                         .run_chars = cuts["run_chars"].get<size_t>()};
  }
  return Status::Ok();
}

}  // namespace mlaserve
