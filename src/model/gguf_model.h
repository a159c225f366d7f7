// A GGUF checkpoint of llama.cpp's `deepseek2` architecture (DeepSeek-V2, V2-Lite, V3, R1,
// Kimi-K2 and relatives) seen as the Hugging Face checkpoint it was converted from: the
// config.json its `deepseek2.*` keys describe and the Hugging Face name of each tensor (its
// tokenizer: tokenizer/gguf_tokenizer.h). The rest of mlaserve then reads a GGUF file as it
// reads safetensors (model/safetensors.h's Checkpoint opens both; LoadModelConfig,
// Tokenizer::FromDirectory and ChatTemplate::ForModel take the file's path), with every check of
// the config and the tensors applied unchanged.
//
// Names (llama.cpp's -> Hugging Face's, per layer N):
//   token_embd / output_norm / output               model.embed_tokens / model.norm / lm_head
//   blk.N.attn_norm, ffn_norm                       input_layernorm, post_attention_layernorm
//   blk.N.attn_q_a, attn_q_a_norm, attn_q_b, attn_q self_attn.q_a_proj, q_a_layernorm, q_b_proj, q_proj
//   blk.N.attn_kv_a_mqa, attn_kv_a_norm             self_attn.kv_a_proj_with_mqa, kv_a_layernorm
//   blk.N.attn_kv_b, or attn_k_b + attn_v_b         self_attn.kv_b_proj (the split pair: see gguf_checkpoint.cc)
//   blk.N.attn_output                               self_attn.o_proj
//   blk.N.ffn_{gate,up,down}                        mlp.{gate,up,down}_proj (dense layers)
//   blk.N.ffn_gate_inp, exp_probs_b                 mlp.gate.weight, mlp.gate.e_score_correction_bias
//   blk.N.ffn_{gate,up,down}_exps (3-D)             mlp.experts.E.{gate,up,down}_proj, one per E
//   blk.N.ffn_{gate,up,down}_shexp                  mlp.shared_experts.{gate,up,down}_proj
// The split layout: attn_k_b is [heads][kv_lora][nope] (torch order) and attn_v_b
// [heads][v][kv_lora]; kv_b_proj's rows are, per head, the nope rows of W_UK then the v rows of W_UV.
#pragma once

#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/config.h"
#include "model/gguf.h"

namespace mlaserve {

// The name's parts: a whole tensor's Hugging Face name, or, for a stacked expert tensor, the
// layer and projection (the experts' names are "model.layers.N.mlp.experts.E.<proj>.weight").
struct HfTensorName {
  std::string name;              // empty for a stacked expert tensor and for attn_k_b / attn_v_b
  int layer = -1;                // blk.N
  std::string expert_projection; // "gate_proj", "up_proj" or "down_proj" for *_exps
  std::string kv_part;           // "k_b" or "v_b" for the split kv_b layout
};
// nullopt: not a deepseek2 tensor name mlaserve knows.
std::optional<HfTensorName> HfNameOfGgufTensor(const std::string& gguf_name);
// The layers whose tensors include a combined attn_kv_b: their split pair, if any, is not read.
std::set<int> CombinedKvBLayers(std::span<const GgufTensorInfo> tensors);
// Routed expert `expert`'s Hugging Face name: "model.layers.N.mlp.experts.E.<projection>.weight".
std::string HfExpertTensorName(int layer, int64_t expert, const std::string& projection);
// The stacked tensor of a layer's experts for a projection ("gate_proj" -> "blk.N.ffn_gate_exps.weight").
std::string GgufExpertsTensorName(int layer, const std::string& projection);
// The inverse, for the writer: a Hugging Face name of a whole tensor (not an expert's) -> GGUF's.
std::optional<std::string> GgufNameOfHfTensor(const std::string& hf_name);

// config.json's fields from the deepseek2 keys (general.architecture must be "deepseek2").
Result<nlohmann::json> HfConfigFromGguf(const GgufFile& f, const std::string& source);
Result<ModelConfig> ModelConfigFromGguf(const GgufFile& f, const std::string& source);

// True when `path` names a GGUF file (by its first four bytes).
bool IsGgufFile(const std::string& path);
// A split GGUF (llama.cpp's gguf-split names: PREFIX-00001-of-00009.gguf ... -00009-of-00009.gguf,
// the metadata in the first, the tensors spread over all): every shard's path in order, from any
// one of them. A file not named so: itself alone. An error names a shard that is missing.
Result<std::vector<std::string>> GgufShardPaths(const std::string& path);
// The GGUF file at `path`, mapped and parsed (metadata and tensor infos only). A split GGUF:
// the first shard's metadata, and every shard's tensor infos (GgufTensorInfo::shard, offsets
// in their own shard), checked: split.count and split.no where the shards say them, no tensor
// twice.
Result<GgufFile> ReadGgufFile(const std::string& path);

}  // namespace mlaserve
