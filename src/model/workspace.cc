#include "model/workspace.h"

#include <algorithm>

#include "model/mla_decode_attention.h"

namespace mlaserve {

Workspace::Workspace(const ModelConfig& c, int n, int context, int num_threads)
    : max_tokens(n), max_context(context) {
  const size_t N = size_t(n), H = size_t(c.hidden_size), heads = size_t(c.num_attention_heads);
  const size_t L = size_t(c.kv_lora_rank), row = size_t(c.kv_cache_dim());
  const size_t experts = size_t(std::max(0, c.n_routed_experts));
  const size_t top_k = size_t(std::max(0, c.num_experts_per_tok));
  const size_t max_inter = size_t(std::max(
      {c.intermediate_size, c.moe_intermediate_size * std::max(1, c.n_shared_experts), 1}));
  hidden.resize(N * H);
  normed.resize(N * H);
  q_a.resize(N * size_t(std::max(0, c.q_lora_rank)));
  q.resize(N * heads * size_t(c.qk_head_dim()));
  kv_a.resize(N * row);
  q_lat.resize(N * heads * row);
  o_lat.resize(heads * N * L);
  attn_out.resize(N * heads * size_t(c.v_head_dim));
  proj.resize(N * H);
  gate.resize(N * max_inter);
  up.resize(N * max_inter);
  expert_in.resize(N * H);
  expert_out.resize(N * H);
  router_logits.resize(N * experts);
  topk_ids.resize(N * top_k);
  topk_weights.resize(N * top_k);
  expert_offsets.resize(experts + 1);
  expert_cursor.resize(experts);
  expert_tokens.resize(N * top_k);
  expert_token_weights.resize(N * top_k);
  last_hidden.resize(N * H);
  kv_tile.resize(size_t(num_threads) * kKvTileRows * row);
  q_lat_t.resize(size_t(num_threads) * row * heads);
  tile_scores.resize(size_t(num_threads) * kKvTileRows * heads);
  tile_probs.resize(size_t(num_threads) * heads * kKvTileRows);
  const size_t threads = size_t(num_threads);
  const size_t qk = size_t(c.qk_head_dim()), v = size_t(c.v_head_dim);
  absorbed_tokens.resize(N);
  kv_split_capacity = std::max({n, (context + kKvSplitRows - 1) / kKvSplitRows, 4 * num_threads});
  kv_split_items.resize(size_t(kv_split_capacity));
  kv_split_first.resize(N);
  split_o.resize(size_t(kv_split_capacity) * heads * L);
  split_max_sum.resize(size_t(kv_split_capacity) * heads * 2);
  const size_t C = kMhaKvRows, B = kMhaQueryRows;
  mha_q.resize(heads * N * qk);
  mha_state.resize(N * heads * 2);
  mha_rows.resize(C * row);
  mha_ckv.resize(C * L);
  mha_k.resize(threads * C * qk);
  mha_kt.resize(threads * qk * C);
  mha_v.resize(threads * C * v);
  mha_scores.resize(threads * B * C);
  router_scratch.resize(2 * experts + size_t(std::max(1, c.n_group)));
}

}  // namespace mlaserve
