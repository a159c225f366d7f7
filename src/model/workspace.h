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
  std::vector<float> softmax_state;  // [threads, 2, heads] running max and sum
  std::vector<float> router_scratch;  // [2 * n_routed_experts + n_group] (routing runs on one thread)
  std::vector<float> gemm_activations;  // a prefill matmul's packed input and threads' scratch (ops.h, GemmScratchFloats)
};

}  // namespace mlaserve
