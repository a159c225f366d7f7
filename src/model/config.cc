#include "model/config.h"

#include "core/read_file.h"
#include "model/config_fields.h"
#include "model/gguf_model.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace mlaserve {
using nlohmann::json;

double YarnGetMscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

double ModelConfig::SoftmaxScale() const {
  double scale = 1.0 / std::sqrt(double(qk_head_dim()));
  if (yarn.enabled && yarn.mscale_all_dim != 0.0) {
    double m = YarnGetMscale(yarn.factor, yarn.mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

namespace {

Status ParseRopeScaling(const json& j, const std::string& source, ModelConfig& c) {
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return Status::Ok();
  const json& rs = j["rope_scaling"];
  if (!rs.is_object()) return Status::Error(source + ": field 'rope_scaling' must be an object or null");
  FieldReader r(rs, source, "rope_scaling.");
  std::string type = r.String("type", "");
  if (type.empty()) type = r.String("rope_type", "");
  MLA_RETURN_IF_ERROR(r.error());
  if (type != "yarn") {
    return Status::Error(source + ": rope_scaling type '" + type +
                         "' is not supported (supported: yarn, or null)");
  }
  c.yarn.enabled = true;
  c.yarn.factor = r.Double("factor", 1.0, true);
  c.yarn.mscale = r.Double("mscale", 1.0, false);
  c.yarn.mscale_all_dim = r.Double("mscale_all_dim", 0.0, false);
  c.yarn.original_max_position_embeddings = r.Int("original_max_position_embeddings", {.min = 1}, 4096, true);
  c.yarn.beta_fast = r.Double("beta_fast", 32.0, false);
  c.yarn.beta_slow = r.Double("beta_slow", 1.0, false);
  MLA_RETURN_IF_ERROR(r.error());
  if (c.yarn.factor < 1.0) r.Fail("factor", "must be >= 1");
  return r.error();
}

// quantization_config: block-scaled fp8 or compressed-tensors pack-quantized int4; anything else
// is one line naming what was found.
Status ParseQuantization(const json& j, const std::string& source, ModelConfig& c) {
  using config_limits::kMaxBlock;
  if (!j.contains("quantization_config") || j["quantization_config"].is_null()) return Status::Ok();
  const json& q = j["quantization_config"];
  const std::string where = source + ": quantization_config";
  if (!q.is_object()) return Status::Error(where + " must be an object");
  FieldReader r(q, source, "quantization_config.");
  const std::string method = r.String("quant_method", "");
  MLA_RETURN_IF_ERROR(r.error());
  if (method == "fp8") {
    const std::string fmt = r.String("fmt", "e4m3");
    const std::string act = r.String("activation_scheme", "dynamic");
    MLA_RETURN_IF_ERROR(r.error());
    if (fmt != "e4m3") return Status::Error(where + ".fmt '" + fmt + "' is not supported (e4m3)");
    if (act != "dynamic") {
      return Status::Error(where + ".activation_scheme '" + act + "' is not supported (dynamic)");
    }
    if (!q.contains("weight_block_size") || q["weight_block_size"].is_null()) {
      return Status::Error(where + ": fp8 without weight_block_size (per-tensor scales) is not supported "
                                   "(supported: block-scaled fp8, weight_block_size [128, 128])");
    }
    const json& b = q["weight_block_size"];
    const IntRange block{.min = 1, .max = kMaxBlock};
    const std::optional<int> rows = b.is_array() && b.size() == 2 ? IntInRange(b[0], block) : std::nullopt;
    const std::optional<int> cols = b.is_array() && b.size() == 2 ? IntInRange(b[1], block) : std::nullopt;
    if (!rows || !cols) {
      return Status::Error(where + ".weight_block_size must be two integers in [1, " + std::to_string(kMaxBlock) +
                           "], got " + QuoteJson(b));
    }
    c.quant.method = WeightQuantMethod::kFp8Block;
    c.quant.block_rows = *rows;
    c.quant.block_cols = *cols;
    if (c.quant.block_rows % 16 != 0) {
      return Status::Error(where + ".weight_block_size rows " + std::to_string(c.quant.block_rows) +
                           " is not supported (a multiple of 16)");
    }
    return Status::Ok();
  }
  if (method == "compressed-tensors") {
    // The format is top-level, or per group under a top-level "mixed" (or none).
    const std::string format = r.String("format", "");
    MLA_RETURN_IF_ERROR(r.error());
    if (format != "pack-quantized" && format != "mixed" && !format.empty()) {
      return Status::Error(where + ".format '" + format + "' is not supported (pack-quantized)");
    }
    if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty()) {
      return Status::Error(where + ".config_groups is missing");
    }
    int group_size = 0;
    for (const auto& [name, group] : q["config_groups"].items()) {
      const std::string g = where + ".config_groups." + name;
      if (!group.is_object()) return Status::Error(g + " must be an object");
      if (group.contains("input_activations") && !group["input_activations"].is_null()) {
        return Status::Error(g + ".input_activations: activation quantization is not supported (weight-only w4a16)");
      }
      const std::string group_format =
          group.contains("format") && group["format"].is_string() ? group["format"].get<std::string>() : format;
      if (group_format != "pack-quantized") {
        return Status::Error(g + ".format '" + group_format + "' is not supported (pack-quantized)");
      }
      if (!group.contains("weights") || !group["weights"].is_object()) return Status::Error(g + ".weights is missing");
      const json& w = group["weights"];
      FieldReader wr(w, source, "quantization_config.config_groups." + name + ".weights.");
      const int bits = wr.Int("num_bits", {}, 0, false);
      const std::string type = wr.String("type", "int");
      const bool symmetric = wr.Bool("symmetric", false);
      const std::string strategy = wr.String("strategy", "");
      const bool dynamic = wr.Bool("dynamic", false);
      const int size = wr.Int("group_size", {.min = 1, .max = kMaxBlock}, 0, true);
      MLA_RETURN_IF_ERROR(wr.error());
      if (bits != 4) {
        return Status::Error(g + ".weights.num_bits " + std::to_string(bits) + " is not supported (4)");
      }
      if (type != "int") return Status::Error(g + ".weights.type '" + type + "' is not supported (int)");
      if (!symmetric) {
        return Status::Error(g + ".weights.symmetric false: asymmetric (zero-point) int4 is not supported");
      }
      if (strategy != "group") {
        return Status::Error(g + ".weights.strategy '" + strategy + "' is not supported (group)");
      }
      if (w.contains("actorder") && !w["actorder"].is_null() && w["actorder"] != false) {
        return Status::Error(g + ".weights.actorder: act-order int4 is not supported");
      }
      if (dynamic) return Status::Error(g + ".weights.dynamic true is not supported");
      if (size % 2 != 0) {
        return Status::Error(g + ".weights.group_size must be a positive even integer, got " + std::to_string(size));
      }
      if (group_size != 0 && size != group_size) {
        return Status::Error(where + ": config_groups with different group sizes are not supported");
      }
      group_size = size;
    }
    c.quant.method = WeightQuantMethod::kInt4Pack;
    c.quant.group_size = group_size;
    if (q.contains("ignore") && !q["ignore"].is_null()) {
      if (!q["ignore"].is_array()) return Status::Error(where + ".ignore must be a list of module names");
      for (const json& entry : q["ignore"]) {
        if (!entry.is_string()) return Status::Error(where + ".ignore must be a list of module names");
        c.quant.ignore.push_back(entry.get<std::string>());
      }
    }
    return Status::Ok();
  }
  return Status::Error(where + ".quant_method '" + method +
                       "' is not supported (supported: fp8 with weight_block_size, compressed-tensors "
                       "pack-quantized int4)");
}

// What each field's range (read above) cannot say: fields that depend on each other.
Status Validate(const ModelConfig& c, FieldReader& r) {
  auto positive = [&](const char* key, int v) {
    if (v <= 0) r.Fail(key, "must be positive, got " + std::to_string(v));
  };
  if (int64_t(c.num_hidden_layers) * c.n_routed_experts > config_limits::kMaxTotalExperts) {
    r.Fail("n_routed_experts", std::to_string(c.n_routed_experts) + " x num_hidden_layers " +
                                   std::to_string(c.num_hidden_layers) + " routed experts exceed " +
                                   std::to_string(config_limits::kMaxTotalExperts));
  }
  if (c.qk_rope_head_dim % 2 != 0) r.Fail("qk_rope_head_dim", "must be even");
  bool has_moe_layer = false, has_dense_layer = false;
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    (c.IsMoeLayer(layer) ? has_moe_layer : has_dense_layer) = true;
  }
  if (has_moe_layer) {
    positive("moe_intermediate_size", c.moe_intermediate_size);
    positive("num_experts_per_tok", c.num_experts_per_tok);
    positive("n_group", c.n_group);
    if (c.num_experts_per_tok > c.n_routed_experts) {
      r.Fail("num_experts_per_tok", "exceeds n_routed_experts");
    }
    if (c.n_group > 0 && c.n_routed_experts % c.n_group != 0) {
      r.Fail("n_group", "must divide n_routed_experts");
    }
    if (c.topk_group <= 0 || c.topk_group > c.n_group) {
      r.Fail("topk_group", "must be between 1 and n_group");
    }
    if (c.topk_method == TopkMethod::kNoauxTc && c.n_group > 0 &&
        c.n_routed_experts / c.n_group < 2) {
      r.Fail("n_group", "noaux_tc needs at least 2 experts per group");
    }
    if (c.n_group > 0 && c.topk_method != TopkMethod::kGreedy &&
        c.topk_group * (c.n_routed_experts / c.n_group) < c.num_experts_per_tok) {
      r.Fail("topk_group", "leaves fewer experts than num_experts_per_tok");
    }
  }
  if (has_dense_layer) positive("intermediate_size", c.intermediate_size);
  if (c.rms_norm_eps <= 0) r.Fail("rms_norm_eps", "must be positive");
  if (c.rope_theta <= 0) r.Fail("rope_theta", "must be positive");
  return r.error();
}

// Kimi-K2.5 (KimiK25ForConditionalGeneration, model_type kimi_k25) wraps a DeepSeek-V3 text
// model: its fields are in `text_config`, beside `vision_config`. Replaces `j` by the text
// config; a `quantization_config` or `tie_word_embeddings` given only at the top level applies
// to the text model too (the top level decides tie_word_embeddings, as the checkpoint has one
// lm_head layout).
struct MultimodalWrapper {
  bool wrapped = false;
  std::string model_type;  // the wrapper's
  bool has_vision_tower = false;
};

Result<MultimodalWrapper> UnwrapMultimodal(json& j, const std::string& source) {
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    arch = j["architectures"][0].get<std::string>();
  }
  const std::string model_type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  if (arch != "KimiK25ForConditionalGeneration" && model_type != "kimi_k25") return MultimodalWrapper{};
  if (!j.contains("text_config") || !j["text_config"].is_object()) {
    return Status::Error(source + ": " + (arch.empty() ? model_type : arch) + " needs a 'text_config' object (the language model's config)");
  }
  json text = j["text_config"];
  for (const char* key : {"quantization_config", "tie_word_embeddings"}) {
    const bool top_level_decides = std::string(key) == "tie_word_embeddings";
    if (j.contains(key) && !j[key].is_null() && (top_level_decides || !text.contains(key) || text[key].is_null())) {
      text[key] = j[key];
    }
  }
  // The text model is DeepSeek-V3's architecture whatever its own model_type says.
  if (!text.contains("architectures")) text["architectures"] = json::array({"DeepseekV3ForCausalLM"});
  if (!text.contains("model_type") || !text["model_type"].is_string() || text["model_type"] == "kimi_k25") {
    text["model_type"] = "kimi_k2";
  }
  MultimodalWrapper wrapper{.wrapped = true,
                            .model_type = model_type.empty() ? "kimi_k25" : model_type,
                            .has_vision_tower = j.contains("vision_config") && !j["vision_config"].is_null()};
  j = std::move(text);
  return wrapper;
}

}  // namespace

Result<ModelConfig> ParseModelConfig(std::string_view json_text, const std::string& source) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Error(source + ": not valid JSON");
  auto wrapper = UnwrapMultimodal(j, source);
  if (!wrapper.ok()) return wrapper.status();

  ModelConfig c;
  FieldReader r(j, source);
  c.model_type = r.String("model_type", "");
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    arch = j["architectures"][0].get<std::string>();
  }
  if (arch == "DeepseekV2ForCausalLM" || (arch.empty() && c.model_type == "deepseek_v2")) {
    c.family = ModelFamily::kDeepSeekV2;
  } else if (arch == "DeepseekV3ForCausalLM" ||
             (arch.empty() && (c.model_type == "deepseek_v3" || c.model_type == "kimi_k2"))) {
    c.family = ModelFamily::kDeepSeekV3;
  } else {
    return Status::Error(source + ": architectures '" + arch + "' (model_type '" + c.model_type +
                         "') is not supported (supported: DeepseekV2ForCausalLM, "
                         "DeepseekV3ForCausalLM with model_type deepseek_v2, deepseek_v3, kimi_k2)");
  }
  if (!c.model_type.empty() && c.model_type != "deepseek_v2" && c.model_type != "deepseek_v3" &&
      c.model_type != "kimi_k2") {
    return Status::Error(source + ": model_type '" + c.model_type +
                         "' is not supported (supported: deepseek_v2, deepseek_v3, kimi_k2)");
  }

  using namespace config_limits;
  const IntRange positive{.min = 1};
  c.torch_dtype = r.String("torch_dtype", "");
  c.vocab_size = r.Int("vocab_size", {.min = 1, .max = kMaxVocab}, 0, true);
  c.hidden_size = r.Int("hidden_size", {.min = 1, .max = kMaxHidden}, 0, true);
  c.intermediate_size = r.Int("intermediate_size", {.min = 0, .max = kMaxIntermediate}, 0, false);
  c.moe_intermediate_size = r.Int("moe_intermediate_size", {.min = 0, .max = kMaxIntermediate}, 0, false);
  c.num_hidden_layers = r.Int("num_hidden_layers", {.min = 1, .max = kMaxLayers}, 0, true);
  c.num_attention_heads = r.Int("num_attention_heads", {.min = 1, .max = kMaxHeads}, 0, true);
  int num_kv_heads = r.Int("num_key_value_heads", {.min = 1, .max = kMaxHeads}, c.num_attention_heads, false);
  if (num_kv_heads != c.num_attention_heads) {
    r.Fail("num_key_value_heads", "must equal num_attention_heads for MLA checkpoints");
  }
  c.q_lora_rank = r.NullableInt("q_lora_rank", {.min = 0, .max = kMaxRank}, 0);
  c.kv_lora_rank = r.Int("kv_lora_rank", {.min = 1, .max = kMaxRank}, 0, true);
  c.qk_nope_head_dim = r.Int("qk_nope_head_dim", {.min = 1, .max = kMaxHeadDim}, 0, true);
  c.qk_rope_head_dim = r.Int("qk_rope_head_dim", {.min = 1, .max = kMaxHeadDim}, 0, true);
  c.v_head_dim = r.Int("v_head_dim", {.min = 1, .max = kMaxHeadDim}, 0, true);

  const IntRange experts{.min = 0, .max = kMaxExperts};
  c.n_routed_experts = r.NullableInt("n_routed_experts", experts, 0);
  c.n_shared_experts = r.NullableInt("n_shared_experts", experts, 0);
  c.num_experts_per_tok = r.NullableInt("num_experts_per_tok", experts, 0);
  c.n_group = r.NullableInt("n_group", experts, 1);
  c.topk_group = r.NullableInt("topk_group", experts, 1);
  c.first_k_dense_replace = r.Int("first_k_dense_replace", {.min = 0}, 0, false);
  c.moe_layer_freq = r.Int("moe_layer_freq", positive, 1, false);
  c.norm_topk_prob = r.Bool("norm_topk_prob", false);
  c.routed_scaling_factor = r.Double("routed_scaling_factor", 1.0, false);

  const std::string topk = r.String("topk_method", "greedy");
  if (topk == "greedy") c.topk_method = TopkMethod::kGreedy;
  else if (topk == "group_limited_greedy") c.topk_method = TopkMethod::kGroupLimitedGreedy;
  else if (topk == "noaux_tc") c.topk_method = TopkMethod::kNoauxTc;
  else r.Fail("topk_method", "'" + topk + "' is not supported (greedy, group_limited_greedy, noaux_tc)");

  const std::string scoring = r.String("scoring_func", "softmax");
  if (scoring == "softmax") c.scoring_func = ScoringFunc::kSoftmax;
  else if (scoring == "sigmoid") c.scoring_func = ScoringFunc::kSigmoid;
  else r.Fail("scoring_func", "'" + scoring + "' is not supported (softmax, sigmoid)");

  const std::string act = r.String("hidden_act", "silu");
  if (act != "silu") r.Fail("hidden_act", "'" + act + "' is not supported (silu)");
  if (r.Bool("attention_bias", false)) r.Fail("attention_bias", "true is not supported");

  c.rope_theta = r.Double("rope_theta", 10000.0, false);
  c.rope_interleave = r.Bool("rope_interleave", true);
  c.max_position_embeddings = r.Int("max_position_embeddings", positive, 0, true);
  c.rms_norm_eps = r.Double("rms_norm_eps", 1e-6, false);
  c.tie_word_embeddings = r.Bool("tie_word_embeddings", false);
  // -1: none. A list of ids (some configs give several) is left to the tokenizer's own eos.
  for (const auto& [key, id] : {std::pair{"bos_token_id", &c.bos_token_id}, {"eos_token_id", &c.eos_token_id}}) {
    if (j.contains(key) && j[key].is_number()) *id = r.Int(key, {.min = -1}, -1, true);
  }
  c.num_nextn_predict_layers = r.NullableInt("num_nextn_predict_layers", {.min = 0, .max = kMaxNextnLayers}, 0);
  MLA_RETURN_IF_ERROR(r.error());
  MLA_RETURN_IF_ERROR(ParseRopeScaling(j, source, c));
  MLA_RETURN_IF_ERROR(ParseQuantization(j, source, c));
  MLA_RETURN_IF_ERROR(Validate(c, r));
  if (wrapper->wrapped) {
    c.model_type = wrapper->model_type;
    c.tensor_prefix = "language_model.";
    c.has_vision_tower = wrapper->has_vision_tower;
  }
  return c;
}

Result<ModelConfig> LoadModelConfig(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && IsGgufFile(path)) {
    auto f = ReadGgufFile(path);
    if (!f.ok()) return f.status();
    return ModelConfigFromGguf(*f, path);
  }
  fs::path file = fs::is_directory(path, ec) ? fs::path(path) / "config.json" : fs::path(path);
  auto text = ReadWholeFile(file.string());
  if (!text.ok()) return Status::Error(text.error() + " (is --model-path a model directory?)");
  return ParseModelConfig(*text, file.string());
}

}  // namespace mlaserve
