// Activation buffers for one forward call of up to max_tokens tokens, allocated once at model
// load and reused by every step (the hot path never allocates). Shapes use:
//   N = max_tokens, H = hidden, heads, L = kv_lora_rank, R = qk_rope_head_dim.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace mlaserve {

// Rows of KV cache attention dequantizes at a time (never across a page).
inline constexpr int kKvTileRows = 16;

// MHA-form prefill (mla_prefill_attention.cc): cache rows decompressed per head at a time, and
// queries per score block.
inline constexpr int kMhaKvRows = 64;
inline constexpr int kMhaQueryRows = 32;

// One work item of the split (flash-decoding) attention: a token of the wave and one KV split.
struct KvSplitItem {
  int32_t token;  // index into the wave's tokens
  int32_t split;  // rows [split * kKvSplitRows, ...) of its context
};

struct Workspace {
  Workspace(const ModelConfig& c, int max_tokens, int max_context, int num_threads);

  int max_tokens;
  int max_context;

  std::vector<float> hidden;    // [N, H] residual stream
  std::vector<float> normed;    // [N, H]
  std::vector<float> q_a;       // [N, q_lora]
  std::vector<float> q;         // [N, heads, nope + rope]
  std::vector<float> kv_a;      // [N, L + R]
  std::vector<float> q_lat;     // [N, heads, L + R] absorbed query: q_nope @ W_UK | rotated q_pe
  std::vector<float> o_lat;     // [heads, N, L] attention output in latent space
  std::vector<float> attn_out;  // [N, heads * v]
  std::vector<float> proj;      // [N, H] a block's output before the residual add
  std::vector<float> gate;      // [N, max_inter]
  std::vector<float> up;        // [N, max_inter]
  std::vector<float> expert_in;   // [N, H] tokens gathered for one expert
  std::vector<float> expert_out;  // [N, H]
  std::vector<float> router_logits;  // [N, n_routed_experts]
  std::vector<int32_t> topk_ids;     // [N, top_k]
  std::vector<float> topk_weights;   // [N, top_k]
  std::vector<int32_t> expert_offsets;  // [n_routed_experts + 1]
  std::vector<int32_t> expert_cursor;   // [n_routed_experts] next free slot while grouping
  std::vector<int32_t> expert_tokens;   // [N * top_k] token index, grouped by expert
  std::vector<float> expert_token_weights;  // [N * top_k]
  std::vector<float> last_hidden;   // [N, H] rows whose logits are wanted
  std::vector<float> kv_tile;       // [threads, kKvTileRows, L + R] dequantized cache rows
  std::vector<float> q_lat_t;       // [threads, L + R, heads] a token's absorbed query, transposed
  std::vector<float> tile_scores;   // [threads, kKvTileRows, heads]
  std::vector<float> tile_probs;    // [threads, heads, kKvTileRows]

  // Absorbed attention split along the KV length (mla_decode_attention.h). S = kv_split_capacity
  // work items per wave: at least max_tokens, one token's splits at max_context, 4 per thread.
  std::vector<int32_t> absorbed_tokens;    // [N] tokens of the step in the absorbed form
  int kv_split_capacity;
  std::vector<KvSplitItem> kv_split_items;  // [S] the wave's (token, split), token-major
  std::vector<int32_t> kv_split_first;     // [N] a wave token's first item
  std::vector<float> split_o;              // [S, heads, L] unnormalized partial o_lat
  std::vector<float> split_max_sum;        // [S, heads, 2] partial max score and exp-sum

  // MHA-form prefill of one segment (mla_prefill_attention.cc). C = kMhaKvRows, B = kMhaQueryRows.
  std::vector<float> mha_q;        // [heads, N, nope + R] queries, q_pe rotated
  std::vector<float> mha_state;    // [N, heads, 2] running max score and exp-sum
  std::vector<float> mha_rows;     // [C, L + R] a KV block's cache rows, dequantized once
  std::vector<float> mha_ckv;      // [C, L] the block's latents, contiguous for the matmul
  std::vector<float> mha_k;        // [threads, C, nope + R] one head's keys [k_nope | k_pe]
  std::vector<float> mha_kt;       // [threads, nope + R, C] the same, transposed
  std::vector<float> mha_v;        // [threads, C, v] one head's values
  std::vector<float> mha_scores;   // [threads, B, C] scores, then probabilities
  std::vector<float> router_scratch;  // [2 * n_routed_experts + n_group] (routing runs on one thread)
};

}  // namespace mlaserve
