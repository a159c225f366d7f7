// The model's shape and every config.json field that changes the math, validated once.
// Parsed from Hugging Face config.json for DeepseekV2ForCausalLM / DeepseekV3ForCausalLM
// (model_type deepseek_v2, deepseek_v3, kimi_k2), and for Kimi-K2.5's multimodal wrapper
// (KimiK25ForConditionalGeneration, model_type kimi_k25), whose `text_config` is a
// DeepSeek-V3 config and whose text tensors live under `language_model.`: mlaserve serves that
// text model and does not load the vision tower.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mlaserve {

enum class ModelFamily { kDeepSeekV2, kDeepSeekV3 };
enum class TopkMethod { kGreedy, kGroupLimitedGreedy, kNoauxTc };
enum class ScoringFunc { kSoftmax, kSigmoid };

struct YarnScaling {
  bool enabled = false;
  double factor = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;  // 0: not set
  int original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

// config.json's quantization_config, reduced to what loading needs. Which tensors are quantized
// is read from the checkpoint itself (a matrix is dense or quantized tensor by tensor); this says
// which quantized layouts are allowed and their block shapes.
enum class WeightQuantMethod {
  kNone,
  kFp8Block,  // quant_method "fp8", fmt e4m3, weight_block_size [rows, cols] (DeepSeek-V3, Kimi-K2)
  kInt4Pack,  // quant_method "compressed-tensors", pack-quantized int4 symmetric group (Kimi-K2-Thinking)
};

struct WeightQuantConfig {
  WeightQuantMethod method = WeightQuantMethod::kNone;
  int block_rows = 128;  // kFp8Block
  int block_cols = 128;  // kFp8Block
  int group_size = 32;   // kInt4Pack
  // kInt4Pack: compressed-tensors' `ignore` list: module names ("lm_head") or "re:" regexes
  // ("re:.*self_attn.*") of Linear layers left unquantized.
  std::vector<std::string> ignore;
};

struct ModelConfig {
  std::string model_type;  // as written in config.json (the wrapper's, for Kimi-K2.5)
  std::string torch_dtype;  // the checkpoint's activation dtype ("bfloat16"); may be empty
  ModelFamily family = ModelFamily::kDeepSeekV3;

  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;      // dense MLP width
  int moe_intermediate_size = 0;  // per routed expert
  int num_hidden_layers = 0;
  int num_attention_heads = 0;

  int q_lora_rank = 0;  // 0: plain q_proj
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;

  int n_routed_experts = 0;  // 0: every layer dense
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int n_group = 1;
  int topk_group = 1;
  TopkMethod topk_method = TopkMethod::kGreedy;
  ScoringFunc scoring_func = ScoringFunc::kSoftmax;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;

  double rope_theta = 10000.0;
  YarnScaling yarn;
  bool rope_interleave = true;
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  int bos_token_id = -1;
  int eos_token_id = -1;
  int num_nextn_predict_layers = 0;  // MTP layers stored after the decoder (skipped at load)
  WeightQuantConfig quant;

  // Multimodal wrappers (Kimi-K2.5): where the text model's tensors are ("language_model."
  // before "model.layers..." and "lm_head..."), and whether the checkpoint also has a vision
  // tower that mlaserve leaves unloaded (so image inputs are refused).
  std::string tensor_prefix;
  bool has_vision_tower = false;

  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Values cached per token per layer by absorbed MLA: latent + rope key.
  int kv_cache_dim() const { return kv_lora_rank + qk_rope_head_dim; }
  bool IsMoeLayer(int layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  }
  // (nope + rope)^-0.5, times mscale^2 for yarn with mscale_all_dim.
  double SoftmaxScale() const;
};

double YarnGetMscale(double factor, double mscale);

// Parses config.json text. `source` names the file in error messages.
Result<ModelConfig> ParseModelConfig(std::string_view json_text, const std::string& source);
// Reads DIR/config.json, or the file itself when `path` is a file; a GGUF file's deepseek2
// metadata (model/gguf_model.h) when it is one.
Result<ModelConfig> LoadModelConfig(const std::string& path);

}  // namespace mlaserve
