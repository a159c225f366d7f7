#include "model/workspace.h"

#include <algorithm>

#include "model/mla_decode_attention.h"
#include "kernels/ops.h"

namespace mlaserve {

Workspace::Workspace(const ModelConfig& c, int n, int context, int num_threads, int block_tokens, bool with_mtp)
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
  expert_out.resize(N * H);
  const int64_t slot_bytes = int64_t(std::max<size_t>(1, top_k * H)) * int64_t(sizeof(float));
  moe_block_tokens = std::min<int64_t>(
      n, block_tokens > 0 ? block_tokens : std::max<int64_t>(kMinMoeBlockTokens, kMoeBlockBytes / slot_bytes));
  const size_t slots = size_t(moe_block_tokens) * top_k;
  const size_t moe_inter = size_t(std::max(0, c.moe_intermediate_size));
  moe_rows.resize(experts > 0 ? slots * H : 0);
  moe_gate.resize(experts > 0 ? slots * moe_inter : 0);
  moe_up.resize(experts > 0 ? slots * moe_inter : 0);
  token_slots.resize(slots);
  const size_t groups = experts + 1;
  // Tiles have at least two panels of 16 rows (ops.h PanelGrain).
  auto max_tiles = [](size_t rows) { return (rows + 31) / 32; };
  mlp_groups.resize(groups);
  mlp_tiles.resize(groups * (1 + max_tiles(max_inter) + max_tiles(H)));
  mlp_pending_prepare = std::vector<std::atomic<int32_t>>(groups);
  mlp_pending_gate_up = std::vector<std::atomic<int32_t>>(groups);
  router_logits.resize(N * experts);
  topk_ids.resize(N * top_k);
  topk_weights.resize(N * top_k);
  expert_offsets.resize(experts + 1);
  expert_cursor.resize(experts);
  expert_tokens.resize(slots);
  expert_token_weights.resize(slots);
  last_hidden.resize(N * H);
  if (with_mtp) mtp_input.resize(N * 2 * H);
  kv_tile.resize(size_t(num_threads) * kKvTileRows * row);
  q_lat_t.resize(size_t(num_threads) * row * size_t(ScoreColumns(int(heads))));
  tile_scores.resize(size_t(num_threads) * kKvTileRows * size_t(ScoreColumns(int(heads))));
  tile_probs.resize(size_t(num_threads) * heads * kKvTileRows);
  tile_stats.resize(size_t(num_threads) * 3 * size_t(ScoreColumns(int(heads))));
  const size_t threads = size_t(num_threads);
  const size_t qk = size_t(c.qk_head_dim()), v = size_t(c.v_head_dim);
  absorbed_tokens.resize(N);
  kv_split_capacity = std::max({n, (context + kKvSplitRows - 1) / kKvSplitRows, 4 * num_threads});
  kv_split_items.resize(size_t(kv_split_capacity));
  kv_split_first.resize(size_t(N) + 1);
  split_o.resize(size_t(kv_split_capacity) * heads * L);
  split_max_sum.resize(size_t(kv_split_capacity) * heads * 2);
  const size_t C = kMhaKvRows, B = kMhaQueryRows;
  mha_q.resize(heads * N * qk);
  mha_state.resize(N * heads * 2);
  mha_rows.resize(C * row);
  mha_ckv.resize(C * L);
  // Panels of 16 rows (C is a multiple of 16; v may not be): F32 at most, one float each.
  static_assert(kMhaKvRows % kPanelRows == 0);
  const size_t v_padded = (v + kPanelRows - 1) / kPanelRows * kPanelRows;
  mha_k.resize(threads * C * qk);
  mha_kp.resize(threads * qk * C);
  mha_v.resize(threads * C * v);
  mha_vp.resize(threads * v_padded * C);
  mha_scores.resize(threads * B * C);
  mha_pv.resize(threads * B * v);
  router_scratch.resize(size_t(num_threads) * (2 * experts + size_t(std::max(1, c.n_group))));
  // The widest input any packed matmul reads: hidden (projections, experts, lm_head), q_lora,
  // heads * v (o_proj), an MLP's intermediate (down) or the MTP's 2 * hidden (eh_proj).
  const int64_t max_cols = std::max({int64_t(H), int64_t(c.q_lora_rank), int64_t(heads) * c.v_head_dim,
                                     int64_t(max_inter), with_mtp ? 2 * int64_t(H) : 0});
  gemm_activations.resize(size_t(GemmScratchFloats(n, max_cols, num_threads)));
}

}  // namespace mlaserve
