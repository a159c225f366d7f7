// Loads Hugging Face's tokenizer.json (the subset byte-level BPE models use) into a
// TokenizerModel: model.vocab / model.merges / options, added_tokens, normalizer (null only),
// pre_tokenizer (ByteLevel, Split, Digits, Sequence). The decoder and post_processor sections
// are not read: decoding is always byte-level, and BOS comes from tokenizer_config.json.
#include <array>
#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/tokenizer_model.h"
#include "tokenizer/utf8.h"

namespace mlaserve {
namespace {

using nlohmann::json;

struct ParsedPreTokenizer {
  std::vector<PreTokenizerStep> steps;
  bool needs_gpt2_pattern = false;
};

Result<SplitBehavior> ParseSplitBehavior(const json& spec, const std::string& where) {
  auto it = spec.find("behavior");
  if (it == spec.end() || !it->is_string()) {
    return Status::Error(where + ".behavior must be a string");
  }
  const std::string& name = it->get_ref<const std::string&>();
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return Status::Error(where + ".behavior '" + name + "' is not a known split behavior");
}

Status ParseSplit(const json& spec, const std::string& where, ParsedPreTokenizer* parsed) {
  auto pattern_it = spec.find("pattern");
  if (pattern_it == spec.end() || !pattern_it->is_object()) {
    return Status::Error(where + ".pattern must be {\"Regex\": ...} or {\"String\": ...}");
  }
  std::optional<std::string> regex_text;
  std::optional<std::string> literal_text;
  MLA_RETURN_IF_ERROR(ReadOptionalString(*pattern_it, "Regex", where + ".pattern", &regex_text));
  MLA_RETURN_IF_ERROR(ReadOptionalString(*pattern_it, "String", where + ".pattern", &literal_text));
  if (regex_text.has_value() == literal_text.has_value()) {
    return Status::Error(where + ".pattern must be {\"Regex\": ...} or {\"String\": ...}");
  }
  Result<Regex> regex = regex_text ? Regex::Compile(*regex_text)
                                   : Regex::Compile(*literal_text, Regex::Syntax::kLiteral);
  if (!regex.ok()) return Status::Error(where + ".pattern: " + regex.error());

  Result<SplitBehavior> behavior = ParseSplitBehavior(spec, where);
  if (!behavior.ok()) return behavior.status();
  bool invert = false;
  MLA_RETURN_IF_ERROR(ReadOptionalBool(spec, "invert", where, false, &invert));
  parsed->steps.emplace_back(SplitStep{
      .pattern = std::move(regex).value(), .behavior = behavior.value(), .invert = invert});
  return Status::Ok();
}

Status ParsePreTokenizer(const json& spec, const std::string& where, ParsedPreTokenizer* parsed) {
  if (spec.is_null()) return Status::Ok();
  if (!spec.is_object()) return Status::Error(where + " must be an object or null");
  std::optional<std::string> type;
  MLA_RETURN_IF_ERROR(ReadOptionalString(spec, "type", where, &type));
  if (!type) return Status::Error(where + " has no \"type\"");

  if (*type == "Sequence") {
    auto list = spec.find("pretokenizers");
    if (list == spec.end() || !list->is_array()) {
      return Status::Error(where + ".pretokenizers must be an array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      MLA_RETURN_IF_ERROR(ParsePreTokenizer(
          (*list)[i], where + ".pretokenizers[" + std::to_string(i) + "]", parsed));
    }
    return Status::Ok();
  }
  if (*type == "Split") return ParseSplit(spec, where, parsed);
  if (*type == "ByteLevel") {
    ByteLevelStep step;
    MLA_RETURN_IF_ERROR(
        ReadOptionalBool(spec, "add_prefix_space", where, true, &step.add_prefix_space));
    MLA_RETURN_IF_ERROR(ReadOptionalBool(spec, "use_regex", where, true, &step.use_regex));
    parsed->needs_gpt2_pattern |= step.use_regex;
    parsed->steps.emplace_back(step);
    return Status::Ok();
  }
  if (*type == "Digits") {
    bool individual_digits = false;
    MLA_RETURN_IF_ERROR(
        ReadOptionalBool(spec, "individual_digits", where, false, &individual_digits));
    // Hugging Face isolates each digit, or merges runs of digits into one piece.
    Result<Regex> digits = Regex::Compile(individual_digits ? R"(\p{N})" : R"(\p{N}+)");
    if (!digits.ok()) return Status::Error(where + ": " + digits.error());
    parsed->steps.emplace_back(SplitStep{.pattern = std::move(digits).value(),
                                         .behavior = SplitBehavior::kIsolated,
                                         .invert = false});
    return Status::Ok();
  }
  return Status::Error(where + " type '" + *type +
                       "' is not supported (supported: ByteLevel, Split, Digits, Sequence)");
}

// Only "no normalization" is supported: null, or a Sequence of nothing.
Status CheckNormalizer(const json& root, const std::string& source) {
  auto it = root.find("normalizer");
  if (it == root.end() || it->is_null()) return Status::Ok();
  const std::string where = source + ": normalizer";
  if (it->is_object()) {
    std::optional<std::string> type;
    MLA_RETURN_IF_ERROR(ReadOptionalString(*it, "type", where, &type));
    auto list = it->find("normalizers");
    if (type == "Sequence" && list != it->end() && list->is_array() && list->empty()) {
      return Status::Ok();
    }
    if (type) {
      return Status::Error(where + " type '" + *type + "' is not supported (only null)");
    }
  }
  return Status::Error(where + " is not supported (only null)");
}

struct VocabTables {
  std::array<TokenId, 256> byte_token_ids;
  TokenIdByBytes id_by_bytes;  // raw bytes -> id (for ignore_merges)
};

Status ReadVocab(const json& model_spec, const std::string& where, bool keep_id_by_bytes,
                 TokenizerModel* model, VocabTables* tables) {
  auto vocab = model_spec.find("vocab");
  if (vocab == model_spec.end() || !vocab->is_object()) {
    return Status::Error(where + ".vocab must be an object of token -> id");
  }
  tables->byte_token_ids.fill(-1);
  std::string raw;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    TokenId id = 0;
    if (!TryReadTokenId(it.value(), &id)) {
      // Not an id: let ReadTokenId say why, naming the entry.
      MLA_RETURN_IF_ERROR(ReadTokenId(it.value(), where + ".vocab[\"" + it.key() + "\"]", &id));
    }
    raw.clear();
    // Entries outside the byte alphabet (special tokens listed in the vocab) are literal text.
    if (!ByteLevelSpellingToBytes(it.key(), &raw)) raw = it.key();
    if (raw.size() == 1) {
      TokenId& byte_id = tables->byte_token_ids[static_cast<unsigned char>(raw[0])];
      if (byte_id < 0) byte_id = id;
    }
    if (keep_id_by_bytes) tables->id_by_bytes.emplace(raw, id);
    model->SetToken(id, it.key(), raw);
  }
  return Status::Ok();
}

// One merge, as "left right" or ["left", "right"]. The error message continues the caller's
// "...merges[N]" prefix.
Status SplitMerge(const json& entry, std::string_view* left, std::string_view* right) {
  if (entry.is_string()) {
    const std::string& text = entry.get_ref<const std::string&>();
    const size_t space = text.find(' ');
    if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
      return Status::Error(" \"" + text + "\" is not two tokens separated by a space");
    }
    *left = std::string_view(text).substr(0, space);
    *right = std::string_view(text).substr(space + 1);
    return Status::Ok();
  }
  if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
    *left = entry[0].get_ref<const std::string&>();
    *right = entry[1].get_ref<const std::string&>();
    return Status::Ok();
  }
  return Status::Error(" must be \"a b\" or [\"a\", \"b\"]");
}

Status ReadMerges(const json& model_spec, const std::string& where, const TokenizerModel& model,
                  std::unordered_map<uint64_t, MergeRule>* merges) {
  auto list = model_spec.find("merges");
  if (list == model_spec.end() || !list->is_array()) {
    return Status::Error(where + ".merges must be an array");
  }
  merges->reserve(list->size());
  std::string joined;
  // Messages are built only on error: real files have 100K+ merges.
  auto entry_where = [&](size_t rank) { return where + ".merges[" + std::to_string(rank) + "]"; };
  for (size_t rank = 0; rank < list->size(); ++rank) {
    std::string_view left;
    std::string_view right;
    if (Status split = SplitMerge((*list)[rank], &left, &right); !split.ok()) {
      return Status::Error(entry_where(rank) + split.message());
    }
    joined.assign(left).append(right);
    auto left_id = model.id_by_spelling.find(left);
    auto right_id = model.id_by_spelling.find(right);
    auto merged_id = model.id_by_spelling.find(std::string_view(joined));
    if (left_id == model.id_by_spelling.end() || right_id == model.id_by_spelling.end() ||
        merged_id == model.id_by_spelling.end()) {
      return Status::Error(entry_where(rank) + " (\"" + std::string(left) + "\", \"" +
                           std::string(right) + "\") uses a token missing from the vocab");
    }
    // Like Hugging Face, a repeated pair keeps its last rank.
    merges->insert_or_assign(BpeModel::PairKey(left_id->second, right_id->second),
                             MergeRule{static_cast<int32_t>(rank), merged_id->second});
  }
  return Status::Ok();
}

Status CheckModelOptions(const json& model_spec, const std::string& where) {
  bool byte_fallback = false;
  MLA_RETURN_IF_ERROR(ReadOptionalBool(model_spec, "byte_fallback", where, false, &byte_fallback));
  if (byte_fallback) return Status::Error(where + ".byte_fallback = true is not supported");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    std::optional<std::string> value;
    MLA_RETURN_IF_ERROR(ReadOptionalString(model_spec, affix, where, &value));
    if (value && !value->empty()) {
      return Status::Error(where + "." + affix + " is not supported by byte-level BPE");
    }
  }
  auto dropout = model_spec.find("dropout");
  if (dropout != model_spec.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return Status::Error(where + ".dropout is not supported (encoding must be deterministic)");
  }
  return Status::Ok();
}

Status ReadAddedTokens(const json& root, const std::string& source,
                       std::vector<AddedToken>* tokens) {
  auto list = root.find("added_tokens");
  if (list == root.end() || list->is_null()) return Status::Ok();
  if (!list->is_array()) return Status::Error(source + ": added_tokens must be an array");
  for (size_t i = 0; i < list->size(); ++i) {
    const json& entry = (*list)[i];
    const std::string where = source + ": added_tokens[" + std::to_string(i) + "]";
    if (!entry.is_object()) return Status::Error(where + " must be an object");
    AddedToken token;
    auto id = entry.find("id");
    if (id == entry.end()) return Status::Error(where + " has no id");
    MLA_RETURN_IF_ERROR(ReadTokenId(*id, where + ".id", &token.id));
    std::optional<std::string> content;
    MLA_RETURN_IF_ERROR(ReadOptionalString(entry, "content", where, &content));
    if (!content || content->empty()) return Status::Error(where + ".content must be non-empty");
    if (!IsValidUtf8(*content)) return Status::Error(where + ".content is not valid UTF-8");
    token.content = std::move(*content);
    MLA_RETURN_IF_ERROR(ReadOptionalBool(entry, "special", where, false, &token.special));
    MLA_RETURN_IF_ERROR(ReadOptionalBool(entry, "lstrip", where, false, &token.lstrip));
    MLA_RETURN_IF_ERROR(ReadOptionalBool(entry, "rstrip", where, false, &token.rstrip));
    MLA_RETURN_IF_ERROR(ReadOptionalBool(entry, "single_word", where, false, &token.single_word));
    tokens->push_back(std::move(token));
  }
  return Status::Ok();
}

Result<std::unique_ptr<TokenizerModel>> BuildModel(const json& root, const std::string& source) {
  if (!root.is_object()) return Status::Error(source + ": top level must be an object");
  auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) {
    return Status::Error(source + ": has no \"model\" object");
  }
  const json& model_spec = *model_it;
  const std::string where = source + ": model";

  std::optional<std::string> type;
  MLA_RETURN_IF_ERROR(ReadOptionalString(model_spec, "type", where, &type));
  // Old files omit the type; a merges list then means BPE, as Hugging Face infers.
  if (!type && model_spec.contains("merges")) type = "BPE";
  if (type != "BPE") {
    return Status::Error(where + " type '" + type.value_or("(none)") +
                         "' is not supported (only BPE)");
  }
  MLA_RETURN_IF_ERROR(CheckModelOptions(model_spec, where));
  MLA_RETURN_IF_ERROR(CheckNormalizer(root, source));

  ParsedPreTokenizer parsed;
  const auto pre_tokenizer_it = root.find("pre_tokenizer");
  if (pre_tokenizer_it != root.end()) {
    MLA_RETURN_IF_ERROR(ParsePreTokenizer(*pre_tokenizer_it, source + ": pre_tokenizer", &parsed));
  }
  std::unique_ptr<Regex> gpt2_pattern;
  if (parsed.needs_gpt2_pattern) {
    Result<std::unique_ptr<Regex>> compiled = PreTokenizer::CompileGpt2Pattern();
    if (!compiled.ok()) return Status::Error(source + ": " + compiled.error());
    gpt2_pattern = std::move(compiled).value();
  }
  PreTokenizer pre_tokenizer(std::move(parsed.steps), std::move(gpt2_pattern));
  if (!pre_tokenizer.has_byte_level_step()) {
    return Status::Error(
        source + ": pre_tokenizer has no ByteLevel step (only byte-level BPE is supported)");
  }

  BpeOptions options;
  MLA_RETURN_IF_ERROR(
      ReadOptionalBool(model_spec, "ignore_merges", where, false, &options.ignore_merges));
  MLA_RETURN_IF_ERROR(ReadOptionalBool(model_spec, "fuse_unk", where, false, &options.fuse_unk));

  auto model = std::make_unique<TokenizerModel>();
  VocabTables tables;
  MLA_RETURN_IF_ERROR(ReadVocab(model_spec, where, options.ignore_merges, model.get(), &tables));

  std::optional<std::string> unk_token;
  MLA_RETURN_IF_ERROR(ReadOptionalString(model_spec, "unk_token", where, &unk_token));
  if (unk_token) {
    auto unk = model->id_by_spelling.find(std::string_view(*unk_token));
    if (unk == model->id_by_spelling.end()) {
      return Status::Error(where + ".unk_token '" + *unk_token + "' is not in the vocab");
    }
    options.unk_id = unk->second;
  }

  std::unordered_map<uint64_t, MergeRule> merges;
  MLA_RETURN_IF_ERROR(ReadMerges(model_spec, where, *model, &merges));

  std::vector<AddedToken> added;
  MLA_RETURN_IF_ERROR(ReadAddedTokens(root, source, &added));
  model->SetAddedTokens(std::move(added));

  model->bpe =
      BpeModel(tables.byte_token_ids, std::move(merges), std::move(tables.id_by_bytes), options);
  model->pre_tokenizer = std::move(pre_tokenizer);
  return model;
}

}  // namespace

Result<std::unique_ptr<TokenizerModel>> ParseHfTokenizerJson(std::string_view json_text,
                                                             const std::string& source) {
  Result<json> root = ParseJsonText(json_text, source);
  if (!root.ok()) return root.status();
  try {
    return BuildModel(root.value(), source);
  } catch (const std::exception& error) {
    // The readers check types first; this is a backstop so nothing escapes the loader.
    return Status::Error(source + ": " + error.what());
  }
}

}  // namespace mlaserve
