#include "model/gguf_model.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "model/safetensors.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

// llama.cpp's per-layer names and Hugging Face's, for whole tensors.
constexpr std::array<std::pair<const char*, const char*>, 18> kLayerNames = {{
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"attn_q_a.weight", "self_attn.q_a_proj.weight"},
    {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
    {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
    {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
    {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"ffn_gate_inp.weight", "mlp.gate.weight"},
    {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias"},
    {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"},
}};
constexpr std::array<std::pair<const char*, const char*>, 3> kGlobalNames = {{
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
}};
constexpr std::array<std::pair<const char*, const char*>, 3> kExpertNames = {{
    {"ffn_gate_exps.weight", "gate_proj"}, {"ffn_up_exps.weight", "up_proj"}, {"ffn_down_exps.weight", "down_proj"}}};

// The deepseek2 keys this mapping reads or knows to be harmless. Any other changes the math in
// ways it does not model (e.g. Mistral-Large-3's attention.temperature_scale, filed under
// deepseek2 by llama.cpp) and is refused by name.
constexpr std::array<const char*, 34> kKnownKeys = {
    "context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "rope.freq_base", "attention.layer_norm_rms_epsilon", "expert_used_count",
    "leading_dense_block_count", "vocab_size", "attention.q_lora_rank", "attention.kv_lora_rank",
    "attention.key_length", "attention.value_length", "attention.key_length_mla", "attention.value_length_mla",
    "expert_feed_forward_length", "expert_count", "expert_shared_count", "expert_weights_scale",
    "expert_weights_norm", "expert_gating_func", "expert_group_count", "expert_group_used_count",
    "rope.dimension_count", "rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length",
    "rope.scaling.yarn_log_multiplier", "rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow",
    "rope.scaling.finetuned", "nextn_predict_layers"};

Result<int64_t> Key(const GgufFile& f, const std::string& arch, const char* key, const std::string& source) {
  auto v = f.Integer(arch + "." + key);
  if (!v.ok()) return Status::Error(source + ": " + v.error());
  return *v;
}

}  // namespace

std::optional<HfTensorName> HfNameOfGgufTensor(const std::string& gguf_name) {
  for (const auto& [g, h] : kGlobalNames) {
    if (gguf_name == g) return HfTensorName{.name = h};
  }
  if (gguf_name.rfind("blk.", 0) != 0) return std::nullopt;
  const size_t dot = gguf_name.find('.', 4);
  if (dot == std::string::npos || dot == 4 || dot - 4 > 6) return std::nullopt;
  int layer = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (gguf_name[i] < '0' || gguf_name[i] > '9') return std::nullopt;
    layer = layer * 10 + (gguf_name[i] - '0');
  }
  const std::string rest = gguf_name.substr(dot + 1);
  const std::string prefix = "model.layers." + std::to_string(layer) + ".";
  for (const auto& [g, h] : kLayerNames) {
    if (rest == g) return HfTensorName{.name = prefix + h, .layer = layer};
  }
  for (const auto& [g, proj] : kExpertNames) {
    if (rest == g) return HfTensorName{.layer = layer, .expert_projection = proj};
  }
  if (rest == "attn_k_b.weight") return HfTensorName{.layer = layer, .kv_part = "k_b"};
  if (rest == "attn_v_b.weight") return HfTensorName{.layer = layer, .kv_part = "v_b"};
  return std::nullopt;
}

std::set<int> CombinedKvBLayers(std::span<const GgufTensorInfo> tensors) {
  std::set<int> layers;
  for (const GgufTensorInfo& t : tensors) {
    const std::optional<HfTensorName> hf = HfNameOfGgufTensor(t.name);
    if (hf && hf->name.ends_with(".self_attn.kv_b_proj.weight")) layers.insert(hf->layer);
  }
  return layers;
}

std::string HfExpertTensorName(int layer, int64_t expert, const std::string& projection) {
  return "model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(expert) + "." + projection +
         ".weight";
}

std::string GgufExpertsTensorName(int layer, const std::string& projection) {
  for (const auto& [g, proj] : kExpertNames) {
    if (projection == proj) return "blk." + std::to_string(layer) + "." + g;
  }
  return {};
}

std::optional<std::string> GgufNameOfHfTensor(const std::string& hf_name) {
  for (const auto& [g, h] : kGlobalNames) {
    if (hf_name == h) return std::string(g);
  }
  const std::string layers = "model.layers.";
  if (hf_name.rfind(layers, 0) != 0) return std::nullopt;
  const size_t dot = hf_name.find('.', layers.size());
  if (dot == std::string::npos) return std::nullopt;
  const std::string index = hf_name.substr(layers.size(), dot - layers.size());
  const std::string rest = hf_name.substr(dot + 1);
  for (const auto& [g, h] : kLayerNames) {
    if (rest == h) return "blk." + index + "." + g;
  }
  return std::nullopt;
}

Result<json> HfConfigFromGguf(const GgufFile& f, const std::string& source) {
  auto arch = f.Text("general.architecture");
  if (!arch.ok()) return Status::Error(source + ": " + arch.error());
  if (*arch != "deepseek2") {
    return Status::Error(source + ": architecture '" + *arch + "' is not supported (supported: deepseek2, i.e. "
                         "DeepSeek-V2/V3/R1 and Kimi-K2 as llama.cpp names them)");
  }
  const std::string a = *arch;
  for (const auto& [key, value] : f.metadata) {
    if (key.rfind(a + ".", 0) != 0) continue;
    const std::string field = key.substr(a.size() + 1);
    if (std::find_if(kKnownKeys.begin(), kKnownKeys.end(), [&](const char* k) { return field == k; }) ==
        kKnownKeys.end()) {
      return Status::Error(source + ": metadata " + key + " is not supported (a deepseek2 variant mlaserve does "
                           "not model)");
    }
  }
  json c;
  auto get = [&](const char* key, const char* field) -> Status {
    auto v = Key(f, a, key, source);
    if (!v.ok()) return v.status();
    c[field] = *v;
    return Status::Ok();
  };
  MLA_RETURN_IF_ERROR(get("embedding_length", "hidden_size"));
  MLA_RETURN_IF_ERROR(get("feed_forward_length", "intermediate_size"));
  MLA_RETURN_IF_ERROR(get("attention.head_count", "num_attention_heads"));
  MLA_RETURN_IF_ERROR(get("attention.kv_lora_rank", "kv_lora_rank"));
  MLA_RETURN_IF_ERROR(get("rope.dimension_count", "qk_rope_head_dim"));
  MLA_RETURN_IF_ERROR(get("context_length", "max_position_embeddings"));
  auto layers = Key(f, a, "block_count", source);
  if (!layers.ok()) return layers.status();
  const int64_t nextn = f.OptionalInteger(a + ".nextn_predict_layers").value_or(0);
  if (nextn < 0 || nextn >= *layers) return Status::Error(source + ": " + a + ".nextn_predict_layers is out of range");
  c["num_hidden_layers"] = *layers - nextn;
  c["num_nextn_predict_layers"] = nextn;
  c["num_key_value_heads"] = c["num_attention_heads"];
  c["q_lora_rank"] = f.OptionalInteger(a + ".attention.q_lora_rank").value_or(0);
  // key_length_mla / value_length_mla: the per-head dims of the decompressed form (newer files,
  // whose key_length / value_length are the latent's 576 / 512); older files give them directly.
  const auto key_length = f.OptionalInteger(a + ".attention.key_length_mla")
                              ? f.OptionalInteger(a + ".attention.key_length_mla")
                              : f.OptionalInteger(a + ".attention.key_length");
  const auto value_length = f.OptionalInteger(a + ".attention.value_length_mla")
                                ? f.OptionalInteger(a + ".attention.value_length_mla")
                                : f.OptionalInteger(a + ".attention.value_length");
  if (!key_length || !value_length) {
    return Status::Error(source + ": " + a + ".attention.key_length(_mla) and value_length(_mla) are required");
  }
  // (Range-checked before the subtraction; ParseModelConfig checks the results.)
  for (int64_t v : {*key_length, *value_length, c["qk_rope_head_dim"].get<int64_t>()}) {
    if (v < 1 || v > 65536) return Status::Error(source + ": " + a + ": an attention head size of " + std::to_string(v));
  }
  c["qk_nope_head_dim"] = *key_length - c["qk_rope_head_dim"].get<int64_t>();
  c["v_head_dim"] = *value_length;
  if (auto n = f.OptionalInteger(a + ".vocab_size")) {
    c["vocab_size"] = *n;
  } else if (const GgufValue* tokens = f.Find("tokenizer.ggml.tokens")) {
    c["vocab_size"] = tokens->length;
  } else {
    for (const GgufTensorInfo& t : f.tensors) {
      if (t.name == "token_embd.weight" && t.ne.size() == 2) c["vocab_size"] = t.ne[1];
    }
  }
  if (!c.contains("vocab_size")) return Status::Error(source + ": the vocabulary size is not given");
  const int64_t experts = f.OptionalInteger(a + ".expert_count").value_or(0);
  c["n_routed_experts"] = experts;
  if (experts > 0) {
    MLA_RETURN_IF_ERROR(get("expert_feed_forward_length", "moe_intermediate_size"));
    MLA_RETURN_IF_ERROR(get("expert_used_count", "num_experts_per_tok"));
    c["n_shared_experts"] = f.OptionalInteger(a + ".expert_shared_count").value_or(0);
    c["first_k_dense_replace"] = f.OptionalInteger(a + ".leading_dense_block_count").value_or(0);
    c["routed_scaling_factor"] = f.OptionalReal(a + ".expert_weights_scale").value_or(1.0);
    c["norm_topk_prob"] = f.OptionalInteger(a + ".expert_weights_norm").value_or(0) != 0;
    c["n_group"] = f.OptionalInteger(a + ".expert_group_count").value_or(1);
    c["topk_group"] = f.OptionalInteger(a + ".expert_group_used_count").value_or(1);
    // expert_gating_func: 1 softmax, 2 sigmoid (absent or 0, llama.cpp's "none": softmax, DeepSeek-V2's).
    int64_t gating = f.OptionalInteger(a + ".expert_gating_func").value_or(1);
    if (gating == 0) gating = 1;
    if (gating != 1 && gating != 2) {
      return Status::Error(source + ": " + a + ".expert_gating_func " + std::to_string(gating) +
                           " is not supported (1 softmax, 2 sigmoid)");
    }
    c["scoring_func"] = gating == 2 ? "sigmoid" : "softmax";
    bool correction_bias = false;
    for (const GgufTensorInfo& t : f.tensors) correction_bias |= t.name.ends_with(".exp_probs_b.bias");
    c["topk_method"] = correction_bias ? "noaux_tc" : c["n_group"].get<int64_t>() > 1 ? "group_limited_greedy" : "greedy";
  }
  const bool v3 = experts > 0 && c["scoring_func"] == "sigmoid";
  c["model_type"] = v3 ? "deepseek_v3" : "deepseek_v2";
  c["architectures"] = {v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"};
  c["rope_theta"] = f.OptionalReal(a + ".rope.freq_base").value_or(10000.0);
  c["rms_norm_eps"] = f.OptionalReal(a + ".attention.layer_norm_rms_epsilon").value_or(1e-6);
  c["torch_dtype"] = "bfloat16";
  bool has_output = false;
  for (const GgufTensorInfo& t : f.tensors) has_output |= t.name == "output.weight";
  c["tie_word_embeddings"] = !has_output;
  if (auto bos = f.OptionalInteger("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = *bos;
  if (auto eos = f.OptionalInteger("tokenizer.ggml.eos_token_id")) c["eos_token_id"] = *eos;
  if (const GgufValue* type = f.Find(a + ".rope.scaling.type")) {
    if (type->type != GgufValueType::kString) return Status::Error(source + ": " + a + ".rope.scaling.type is not a string");
    if (type->text == "yarn") {
      // yarn_log_multiplier is 0.1 x mscale_all_dim (llama.cpp's conversion); mscale equals it
      // in the DeepSeek and Kimi configs.
      const double mscale_all_dim = f.OptionalReal(a + ".rope.scaling.yarn_log_multiplier").value_or(0.0) / 0.1;
      json rs = {{"type", "yarn"},
                 {"factor", f.OptionalReal(a + ".rope.scaling.factor").value_or(1.0)},
                 {"original_max_position_embeddings",
                  f.OptionalInteger(a + ".rope.scaling.original_context_length").value_or(4096)},
                 {"beta_fast", f.OptionalReal(a + ".rope.scaling.yarn_beta_fast").value_or(32.0)},
                 {"beta_slow", f.OptionalReal(a + ".rope.scaling.yarn_beta_slow").value_or(1.0)}};
      if (mscale_all_dim != 0.0) rs["mscale"] = rs["mscale_all_dim"] = mscale_all_dim;
      c["rope_scaling"] = rs;
    } else if (type->text != "none") {
      return Status::Error(source + ": rope scaling '" + type->text + "' is not supported (yarn, none)");
    }
  }
  return c;
}

Result<ModelConfig> ModelConfigFromGguf(const GgufFile& f, const std::string& source) {
  auto c = HfConfigFromGguf(f, source);
  if (!c.ok()) return c.status();
  return ParseModelConfig(c->dump(), source + " (its deepseek2 metadata)");
}

Result<std::vector<std::string>> GgufShardPaths(const std::string& path) {
  // PREFIX-NNNNN-of-MMMMM.gguf (gguf-split's llama_split_path: five digits each).
  static const std::regex kSplit(R"((.*)-([0-9]{5})-of-([0-9]{5})\.gguf)");
  std::smatch m;
  if (!std::regex_match(path, m, kSplit)) return std::vector<std::string>{path};
  const int count = std::stoi(m[3].str()), no = std::stoi(m[2].str());
  if (count < 1 || no < 1 || no > count) return Status::Error(path + ": a split GGUF name with shard " + m[2].str() + " of " + m[3].str());
  std::vector<std::string> shards;
  for (int i = 1; i <= count; ++i) {
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", i, count);
    shards.push_back(m[1].str() + suffix);
    std::error_code ec;
    if (!std::filesystem::exists(shards.back(), ec)) {
      return Status::Error(shards.back() + ": missing (shard " + std::to_string(i) + " of the " + std::to_string(count) +
                           " this split GGUF is named for)");
    }
  }
  return shards;
}

Result<GgufFile> ReadGgufFile(const std::string& path) {
  auto shards = GgufShardPaths(path);
  if (!shards.ok()) return shards.status();
  auto read = [](const std::string& p) -> Result<GgufFile> {
    auto mapped = MappedFile::Open(p);
    if (!mapped.ok()) return mapped.status();
    auto f = ParseGguf(std::string_view(reinterpret_cast<const char*>((*mapped)->data()), (*mapped)->size()), p);
    if (f.ok()) {
      f->shard_file_bytes = {(*mapped)->size()};
      f->shard_data_offsets = {f->data_offset};
    }
    return f;
  };
  auto first = read(shards->front());
  if (!first.ok()) return first;
  if (shards->size() == 1) {
    if (auto n = first->OptionalInteger("split.count"); n && *n > 1) {
      return Status::Error(path + ": one shard of " + std::to_string(*n) + " (split.count), but not named as one "
                           "(PREFIX-00001-of-" + std::string(5 - std::min<size_t>(5, std::to_string(*n).size()), '0') +
                           std::to_string(*n) + ".gguf ...): its other shards cannot be found");
    }
    return first;
  }
  const int count = int(shards->size());
  std::set<std::string> names;
  for (const GgufTensorInfo& t : first->tensors) names.insert(t.name);
  // The split keys of shard i (split.no counts from 0) against its name.
  const auto check = [&](const GgufFile& f, int i) -> Status {
    const std::string& p = (*shards)[size_t(i)];
    if (auto n = f.OptionalInteger("split.count"); n && *n != count) {
      return Status::Error(p + ": split.count says " + std::to_string(*n) + " shards, its name " + std::to_string(count));
    }
    if (auto n = f.OptionalInteger("split.no"); n && *n != i) {
      return Status::Error(p + ": split.no says shard " + std::to_string(*n) + ", its name " + std::to_string(i));
    }
    return Status::Ok();
  };
  MLA_RETURN_IF_ERROR(check(*first, 0));
  for (int i = 1; i < count; ++i) {
    Result<GgufFile> shard = read((*shards)[size_t(i)]);
    if (!shard.ok()) return shard.status();
    MLA_RETURN_IF_ERROR(check(*shard, i));
    first->shard_file_bytes.push_back(shard->shard_file_bytes[0]);
    first->shard_data_offsets.push_back(shard->data_offset);
    const std::string& p = (*shards)[size_t(i)];
    for (GgufTensorInfo& t : shard->tensors) {
      if (!names.insert(t.name).second) return Status::Error(p + ": tensor '" + t.name + "' is in another shard too");
      t.shard = i;
      first->tensors.push_back(std::move(t));
    }
  }
  if (auto n = first->OptionalInteger("split.tensors.count"); n && *n != int64_t(first->tensors.size())) {
    return Status::Error(shards->front() + ": split.tensors.count says " + std::to_string(*n) + " tensors, the shards hold " +
                         std::to_string(first->tensors.size()));
  }
  return first;
}

bool IsGgufFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && magic[0] == 'G' && magic[1] == 'G' && magic[2] == 'U' && magic[3] == 'F';
}

}  // namespace mlaserve
