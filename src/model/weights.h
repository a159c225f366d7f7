// The model's weights, bound by name from a Checkpoint and checked against the config: every
// tensor present, in a supported dtype, with the exact shape the config implies.
// Ownership: matrices are views into the Checkpoint's mappings (the Checkpoint must outlive
// ModelWeights); small vectors (norms, router bias) are converted to fp32 copies at load.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/huge_page_buffer.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/weight_matrix.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace mlaserve {

struct MlpWeights {
  WeightMatrix gate;  // [inter, hidden]
  WeightMatrix up;    // [inter, hidden]
  WeightMatrix down;  // [hidden, inter]
};

struct AttentionWeights {
  // q_lora_rank > 0: q_a -> q_a_norm -> q_b. Otherwise q_proj.
  WeightMatrix q_a;                 // [q_lora, hidden]
  std::vector<float> q_a_norm;      // [q_lora]
  WeightMatrix q_b;                 // [heads * (nope + rope), q_lora]
  WeightMatrix q_proj;              // [heads * (nope + rope), hidden]
  WeightMatrix kv_a;                // [kv_lora + rope, hidden]
  std::vector<float> kv_a_norm;     // [kv_lora]
  WeightMatrix kv_b;                // [heads * (nope + v), kv_lora]: per head W_UK rows, then W_UV
  // Or, from a GGUF file's split pair kept in its formats (model/gguf_checkpoint.cc), kv_b empty:
  WeightMatrix k_b;                 // [heads * kv_lora, nope]: per head W_UK^T, grouped along nope
  WeightMatrix v_b;                 // [heads * v, kv_lora]: per head W_UV
  WeightMatrix o_proj;              // [hidden, heads * v]
  // kv_b's per-head copies in panels for the absorbed decode and the MHA prefill
  // (model/absorbed_weights.h; empty for the formats that keep the row-major path), in
  // ModelWeights::absorbed_storage:
  std::vector<WeightMatrix> uk_t;   // [heads] W_UK^T [kv_lora, nope] (the absorbed query)
  std::vector<WeightMatrix> uv;     // [heads] W_UV [v, kv_lora] (both forms' values)
  std::vector<WeightMatrix> uk;     // [heads] W_UK [nope, kv_lora] (the MHA form's keys)
  // [heads] with a grouped uk_t: W_UK's group scales transposed, F32 [kv_lora / group][nope],
  // then with mins W_UK's mins F32 [nope][kv_lora / group] (MultiplyAbsorbedQuery reads them:
  // ScaleAbsorbedQuery, or the table's grouped_query_product); each just before its head's copy.
  std::vector<const float*> uk_t_scales;
};

// Whether the layer holds a GGUF's split pair (k_b, v_b) instead of kv_b.
inline bool HasSplitKvB(const AttentionWeights& a) { return a.k_b.data != nullptr; }

struct MoeWeights {
  WeightMatrix router;                   // [n_routed_experts, hidden]
  std::vector<float> correction_bias;    // [n_routed_experts], noaux_tc only
  std::vector<MlpWeights> experts;       // n_routed_experts, each moe_intermediate wide
  bool has_shared = false;
  MlpWeights shared;                     // n_shared_experts * moe_intermediate wide
};

struct LayerWeights {
  std::vector<float> input_norm;      // [hidden]
  std::vector<float> post_attn_norm;  // [hidden]
  AttentionWeights attn;
  bool is_moe = false;
  MlpWeights mlp;  // dense layers
  MoeWeights moe;  // MoE layers
};

// DeepSeek-V3's multi-token-prediction (NEXTN) layer, model.layers.{num_hidden_layers}.*: it
// predicts the token after next from the target's final-normed hidden state h_j and the token
// t_{j+1} (docs/architecture.md, "MTP drafts"). It shares the embedding and lm_head with the
// model (the checkpoint's copies, embed_tokens and shared_head.head, are not read).
struct MtpWeights {
  std::vector<float> enorm;      // [hidden] on the embedding of t_{j+1}
  std::vector<float> hnorm;      // [hidden] on h_j
  WeightMatrix eh_proj;          // [hidden, 2 * hidden]: input [enorm(embed) | hnorm(h)]
  LayerWeights block;            // a decoder layer, MoE or dense as layer num_hidden_layers would be
  std::vector<float> head_norm;  // [hidden] shared_head.norm, before lm_head
};

struct ModelWeights {
  // Owns the packed copies of every matrix the matmul kernels read (see PackWeights).
  HugePageBuffer packed_storage;
  // Owns kv_b's per-head copies (PackAbsorbedWeights).
  HugePageBuffer absorbed_storage;
  WeightMatrix embed;    // [vocab, hidden]
  WeightMatrix lm_head;  // [vocab, hidden] (the embedding when tie_word_embeddings)
  std::vector<float> final_norm;  // [hidden]
  std::vector<LayerWeights> layers;
  bool has_mtp = false;  // mtp is bound (BindWeights with_mtp)
  MtpWeights mtp;
};

// with_mtp: also binds the first MTP layer (the config must declare num_nextn_predict_layers > 0).
Result<ModelWeights> BindWeights(const ModelConfig& config, const Checkpoint& checkpoint, bool with_mtp = false);

// Copies every matrix that goes through MatMul (all but the embedding and kv_b_proj, which are
// read by rows) into panels of kPanelRows rows, in their dtype, owned by weights.packed_storage,
// and points the views at the copies. Done once at load; uses `pool` to copy in parallel.
// `after_each(source)` runs once a matrix is copied, with its row-major source view (Model::Load
// gives the source's mapped pages back there).
// An error only when the memory is not there.
[[nodiscard]] Status PackWeights(ModelWeights& weights, ThreadPool& pool,
                                 const std::function<void(const WeightMatrix&)>& after_each = {});

// Every tensor BindWeights reads for `config` (with_mtp: and the MTP layer's, which the config
// must declare), with its shape (for writing checkpoints).
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<TensorSpec> ListWeightTensors(const ModelConfig& config, bool with_mtp = false);

// Converts a 1-D tensor (any float dtype) to fp32.
std::vector<float> TensorToF32(const TensorView& t);

}  // namespace mlaserve
