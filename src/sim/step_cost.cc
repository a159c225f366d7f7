#include "sim/step_cost.h"

#include <algorithm>
#include <cmath>

#include "model/tp_comm.h"
#include "model/tp_weights.h"

namespace mlaserve {

Result<StepCostModel> StepCostModel::Create(const ModelConfig& c, std::span<const StoredTensor> stored,
                                            KvFormat kv_format, int tp_size) {
  if (tp_size < 1 || c.num_attention_heads % tp_size != 0) {
    return Status::Error("--tp-size " + std::to_string(tp_size) + " does not divide the " +
                         std::to_string(c.num_attention_heads) + " attention heads");
  }
  MLA_RETURN_IF_ERROR(ValidateKvFormatDims(kv_format, c.kv_lora_rank, c.qk_rope_head_dim));
  StepCostModel m;
  m.tp_size_ = tp_size;
  m.layers_ = c.num_hidden_layers;
  for (int l = 0; l < c.num_hidden_layers; ++l) m.moe_layers_ += c.IsMoeLayer(l) ? 1 : 0;
  m.heads_ = c.num_attention_heads / tp_size;
  m.latent_dim_ = c.kv_lora_rank;
  m.rope_dim_ = c.qk_rope_head_dim;
  m.qk_head_dim_ = c.qk_head_dim();
  m.nope_dim_ = c.qk_nope_head_dim;
  m.v_head_dim_ = c.v_head_dim;
  m.experts_ = c.n_routed_experts;
  m.top_k_ = c.num_experts_per_tok;
  m.fp8_weights_ = c.quant.method == WeightQuantMethod::kFp8Block;

  // Bytes as stored; parameters from the same tensors in bf16 (2 bytes a parameter).
  const TpWeightPlan bytes = PlanTpWeights(c, stored, tp_size);
  ModelConfig plain = c;
  plain.quant = WeightQuantConfig{};
  const std::vector<StoredTensor> plain_tensors = EstimateStoredTensors(plain);
  const TpWeightPlan params = PlanTpWeights(plain, plain_tensors, tp_size);
  const int64_t rank = bytes.largest_rank;
  const TpRankWeights& held = bytes.ranks[size_t(rank)];
  const TpRankWeights& held_params = params.ranks[size_t(rank)];
  m.held_bytes_ = held.bytes;
  m.rank_experts_ = held.experts_per_layer;
  const double embedding = c.tie_word_embeddings ? 0.0 : bytes.embedding_bytes;
  m.dense_bytes_ = held.bytes - held.expert_bytes - embedding;
  const double expert_slots = double(held.experts_per_layer) * double(m.moe_layers_);
  m.expert_bytes_ = expert_slots > 0 ? held.expert_bytes / expert_slots : 0;
  m.lm_head_params_ = double(c.vocab_size) * double(c.hidden_size) / tp_size;
  const double plain_embedding = c.tie_word_embeddings ? 0.0 : params.embedding_bytes;
  m.dense_params_ = std::max(0.0, (held_params.bytes - held_params.expert_bytes - plain_embedding) / 2 - m.lm_head_params_);
  m.expert_params_ = expert_slots > 0 ? held_params.expert_bytes / 2 / expert_slots : 0;
  m.kv_bytes_per_token_ = KvRowBytes(kv_format, c.kv_lora_rank, c.qk_rope_head_dim) * size_t(c.num_hidden_layers);
  if (tp_size > 1) {
    const TpCommPerToken comm = ModelTpComm(c, tp_size, TpScheme::kAllReduce);
    m.comm_bytes_per_token_ = comm.prefill_bytes();
    m.comm_bytes_per_row_ = comm.lm_head_bytes;
    m.comm_rounds_per_step_ = comm.messages_per_step() * LatencyRoundsPerCollective(tp_size);
  }
  return m;
}

StepWork StepCostModel::Work(const BatchPlan& plan) const {
  StepWork w;
  w.tokens = plan.num_tokens();
  w.logits_rows = plan.num_logits_rows;
  const double T = w.tokens;
  // Distinct routed experts of the rank a step touches, per MoE layer (uniform top-k routing).
  const double touched =
      experts_ > 0 ? double(rank_experts_) * (1.0 - std::pow(1.0 - double(top_k_) / experts_, T)) : 0.0;
  w.weight_bytes = dense_bytes_ + moe_layers_ * touched * expert_bytes_;
  const double expert_tokens = experts_ > 0 ? T * top_k_ * double(rank_experts_) / experts_ : 0.0;
  w.linear_flops = 2.0 * (T * dense_params_ + w.logits_rows * lm_head_params_ + moe_layers_ * expert_tokens * expert_params_);
  const double absorbed_per_pair = 2.0 * heads_ * (double(latent_dim_ + rope_dim_) + latent_dim_);
  const double mha_per_pair = 2.0 * heads_ * double(qk_head_dim_ + v_head_dim_);
  const double decompress_per_row = 2.0 * heads_ * double(latent_dim_) * (nope_dim_ + v_head_dim_);
  for (const PlannedSequence& s : plan.sequences) {
    const double c = s.num_computed_tokens, n = s.num_new_tokens;
    w.kv_bytes += (c + n) * double(kv_bytes_per_token_);
    const double pairs = n * c + n * (n + 1) / 2;  // causal: query i sees c + i + 1 keys
    const double absorbed = pairs * absorbed_per_pair;
    const double mha = pairs * mha_per_pair + (c + n) * decompress_per_row;
    w.attention_flops += layers_ * std::min(absorbed, mha);
  }
  w.comm_bytes = T * comm_bytes_per_token_ + w.logits_rows * comm_bytes_per_row_;
  w.comm_rounds = comm_rounds_per_step_;
  return w;
}

StepTime StepCostModel::Time(const StepWork& w, const HardwareProfile& p) const {
  StepTime t;
  const double bandwidth = p.memory_bandwidth_gbs * 1e9;
  const double linear_rate = (fp8_weights_ && p.fp8_tflops > 0 ? p.fp8_tflops : p.bf16_tflops) * 1e12;
  t.weights_s = w.weight_bytes / (bandwidth * p.efficiency.weights);
  t.linear_s = w.linear_flops / (linear_rate * p.efficiency.linear);
  t.kv_s = w.kv_bytes / (bandwidth * p.efficiency.kv);
  t.attention_s = w.attention_flops / (p.bf16_tflops * 1e12 * p.efficiency.attention);
  if (w.comm_bytes > 0 && p.interconnect_gbs > 0) {
    t.comm_s = w.comm_bytes / (p.interconnect_gbs * 1e9 * p.efficiency.interconnect) +
               w.comm_rounds * p.collective_latency_us * 1e-6;
  }
  t.overhead_s = (p.step_overhead_us + p.per_token_us * w.tokens + p.per_logits_row_us * w.logits_rows) * 1e-6;
  const auto combine = [&](double memory, double compute) {
    return p.combine == CostCombine::kMax ? std::max(memory, compute) : memory + compute;
  };
  t.total_s = combine(t.weights_s, t.linear_s) + combine(t.kv_s, t.attention_s) + t.comm_s + t.overhead_s;
  return t;
}

}  // namespace mlaserve
