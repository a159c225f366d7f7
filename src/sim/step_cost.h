// The cost model of one engine step, for `mlaserve simulate`: what a BatchPlan makes the busiest
// tensor-parallel rank read and compute (StepWork, from the model's config and stored tensors),
// and how long that takes on a HardwareProfile (StepTime). A phase's memory time and arithmetic
// time combine as the profile says (max: overlapped, sum: one after the other):
//   linear    = combine(weight bytes / (bandwidth x e.weights), products' FLOPs / (rate x e.linear))
//   attention = combine(KV bytes / (bandwidth x e.kv), attention FLOPs / (bf16 rate x e.attention))
//   step      = linear + attention + collectives + step_overhead + per_token x tokens
//               + per_logits_row x rows
// What is counted (docs/simulate.md, "The model of a step"):
//   - weights: everything the rank holds but the embedding table (a token reads one row) and
//     its routed experts, of which a step of T tokens touches the expected number of distinct
//     ones under uniform top-k routing: m (1 - (1 - k/E)^T) of the rank's m per layer;
//   - products: 2 FLOPs per parameter per token, lm_head per logits row only, the routed
//     experts at k/E of the tokens per expert;
//   - KV: each sequence reads its whole context, every layer, once per step, in its format;
//   - attention FLOPs: per sequence, the cheaper of the absorbed form (scores over the 576
//     latent+rope values and the weighted sum over the 512 latent ones, per head and query-key
//     pair) and the MHA form (per pair qk_head_dim + v_head_dim, plus decompressing every cached
//     row through kv_b_proj), as mlaserve's UseMhaPrefill and SGLang choose;
//   - collectives: ring all-reduces of the hidden state per layer (model/tp_comm.h) at
//     interconnect_gbs, and the latency rounds of each.
#pragma once

#include <span>

#include "core/status.h"
#include "engine/batch_plan.h"
#include "kvcache/kv_format.h"
#include "model/config.h"
#include "model/weight_bytes.h"
#include "sim/hardware_profile.h"

namespace mlaserve {

// What one step asks of the busiest rank.
struct StepWork {
  int tokens = 0;
  int logits_rows = 0;
  double weight_bytes = 0;
  double linear_flops = 0;
  double kv_bytes = 0;
  double attention_flops = 0;
  double comm_bytes = 0;  // received
  int comm_rounds = 0;
};

struct StepTime {
  double weights_s = 0, linear_s = 0, kv_s = 0, attention_s = 0, comm_s = 0, overhead_s = 0;
  double total_s = 0;
};

class StepCostModel {
 public:
  // stored: the checkpoint's tensors, or EstimateStoredTensors(config).
  static Result<StepCostModel> Create(const ModelConfig& config, std::span<const StoredTensor> stored,
                                      KvFormat kv_format, int tp_size);

  StepWork Work(const BatchPlan& plan) const;
  StepTime Time(const StepWork& work, const HardwareProfile& profile) const;

  int tp_size() const { return tp_size_; }
  double weight_bytes_per_rank() const { return held_bytes_; }  // what the busiest rank holds
  size_t kv_bytes_per_token() const { return kv_bytes_per_token_; }
  bool fp8_weights() const { return fp8_weights_; }

 private:
  int tp_size_ = 1;
  int layers_ = 0, moe_layers_ = 0;
  int heads_ = 0;           // per rank
  int latent_dim_ = 0, rope_dim_ = 0, qk_head_dim_ = 0, nope_dim_ = 0, v_head_dim_ = 0;
  int experts_ = 0, top_k_ = 0;
  int64_t rank_experts_ = 0;        // routed experts per MoE layer on the busiest rank
  double held_bytes_ = 0;
  double dense_bytes_ = 0;          // read every step: all but the embedding and the routed experts
  double expert_bytes_ = 0;         // one routed expert of one layer
  double dense_params_ = 0;         // multiplied per token (lm_head not included)
  double lm_head_params_ = 0;       // per logits row
  double expert_params_ = 0;        // one routed expert of one layer
  size_t kv_bytes_per_token_ = 0;   // every layer
  double comm_bytes_per_token_ = 0, comm_bytes_per_row_ = 0;
  int comm_rounds_per_step_ = 0;
  bool fp8_weights_ = false;
};

}  // namespace mlaserve
