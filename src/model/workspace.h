// Activation buffers for one forward call of up to max_tokens tokens, allocated once at model
// load and reused by every step (the hot path never allocates). Shapes use:
//   N = max_tokens, H = hidden, heads, L = kv_lora_rank, R = qk_rope_head_dim.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace mlaserve {

// Rows of KV cache the absorbed attention dequantizes at a time (read page by page): a whole KV
// split of the shortest length (kKvSplitRows, mla_decode_attention.h), so such a split's
// weighted sum is stored once and never reloaded and corrected; the bf16 kernels' per-tile costs
// (the sum's loads and stores of its outputs, the softmax step) spread over twice the rows of 64. With the query
// packed once a thread: `bench-kernels --attention-only`, 4K context, 128 heads, two threads,
// three alternating rounds: 56-60% -> 65-70% of the compute bound (docs/benchmarks.md).
inline constexpr int kKvTileRows = 128;

// MHA-form prefill (mla_prefill_attention.cc): cache rows decompressed per head at a time, and
// queries per score block. 256 rows: each query block is converted, scored, soft-maxed and added
// into its output once per 256 keys instead of once per 64 (a 3,900-token prompt prefilled ~14%
// faster, docs/benchmarks.md); 512 once the panels' packing and the output's correction became
// vector work (half the passes over the outputs: 4K prefill attention 7% faster in five
// alternating rounds; 1024 measured as 512), one thread's keys, values and their panels ~1 MB.
inline constexpr int kMhaKvRows = 512;
inline constexpr int kMhaQueryRows = 32;

// One work item of the split (flash-decoding) attention: a token of the wave and `count`
// consecutive KV splits of its context, run by one thread (AttendLatentSplits).
struct KvSplitItem {
  int32_t token;  // index into the wave's tokens
  int32_t split;  // the first: rows [split * split_rows, ...) of its context (LatentAttentionShape)
  int32_t count;  // splits (SplitsPerItem)
};

// The MoE runs its routed experts over blocks of at most B tokens (the per-slot buffers hold B
// tokens' top_k slots); unless set (ModelOptions::moe_block_tokens), B is what keeps the
// gathered rows [B * top_k, H] within kMoeBlockBytes, at least kMinMoeBlockTokens, at most
// max_batch_tokens. Each block reads every routed expert it uses once.
inline constexpr int64_t kMoeBlockBytes = int64_t(256) << 20;
inline constexpr int kMinMoeBlockTokens = 64;

// One MLP (an expert, the shared experts, a dense layer's MLP) over `count` rows: gate and up,
// silu(gate) * up written over gate, then down. When gather_rows is set, x's rows are first
// copied from gather_source's rows gather_rows[0, count).
struct MlpGroup {
  int id = 0;  // ties in the run order (expert index; the shared experts E)
  const MlpWeights* w = nullptr;
  float* x = nullptr;      // [count, hidden]
  int count = 0;
  float* gate = nullptr;   // [count, inter] gate, then silu(gate) * up
  float* up = nullptr;     // [count, inter]
  float* out = nullptr;    // [count, hidden] (may be x: x is dead once the gate/up tiles ran)
  const float* gather_source = nullptr;  // [tokens, hidden]
  const int32_t* gather_rows = nullptr;  // [count]
  // Set by RunMlps: x packed for the packed-activation product (the table's pack_activations
  // layout, kernels.h), then the down input packed; null: the products read x and gate as they are.
  float* packed = nullptr;
};

// One work item of Model::RunMlps: a group's gather and packing, or a range of its panels of
// gate and up (with the SiLU) or of down.
struct MlpTile {
  enum Kind : int32_t { kPrepare, kGateUp, kDown };
  Kind kind;
  int32_t group;
  int32_t panel_begin, panel_end;
};

struct Workspace {
  // moe_block_tokens: 0 for the default (see kMoeBlockBytes).
  // with_mtp: also the MTP layer's input (mtp_input) and its eh_proj product.
  Workspace(const ModelConfig& c, int max_tokens, int max_context, int num_threads, int moe_block_tokens = 0,
            bool with_mtp = false);

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
  std::vector<float> expert_out;  // [N, H] the shared experts' output
  int moe_block_tokens;           // B <= N
  std::vector<float> moe_rows;    // [B * top_k, H] each slot's gathered input, then its expert's output
  std::vector<float> moe_gate;    // [B * top_k, moe_inter]
  std::vector<float> moe_up;      // [B * top_k, moe_inter]
  std::vector<int32_t> token_slots;  // [B, top_k] the slots of each token of the block
  std::vector<MlpGroup> mlp_groups;  // [n_routed_experts + 1]
  std::vector<MlpTile> mlp_tiles;    // [groups * (1 + gate/up tiles + down tiles)], an upper bound
  std::vector<std::atomic<int32_t>> mlp_pending_prepare;  // [n_routed_experts + 1] 1 until gathered/packed
  std::vector<std::atomic<int32_t>> mlp_pending_gate_up;  // [n_routed_experts + 1] gate/up tiles (+ packing) left
  std::vector<float> router_logits;  // [N, n_routed_experts]
  std::vector<int32_t> topk_ids;     // [N, top_k]
  std::vector<float> topk_weights;   // [N, top_k]
  std::vector<int32_t> expert_offsets;  // [n_routed_experts + 1]
  std::vector<int32_t> expert_cursor;   // [n_routed_experts] next free slot while grouping
  std::vector<int32_t> expert_tokens;   // [B * top_k] token index, grouped by expert
  std::vector<float> expert_token_weights;  // [B * top_k]
  std::vector<float> last_hidden;   // [N, H] rows whose logits are wanted
  std::vector<float> mtp_input;     // [N, 2H] the MTP layer's [enorm(embed) | hnorm(h)] (with_mtp)
  // [N, C, H] the residual stream entering each of the C captured layers (ModelOptions::
  // capture_layers), per token of the last Forward; sized by the model at load, empty without.
  std::vector<float> captured;
  std::vector<float> kv_tile;       // [threads, kKvTileRows, L + R] dequantized cache rows
  std::vector<float> q_lat_t;       // [threads, L + R, heads] a token's absorbed query, transposed
  std::vector<float> tile_scores;   // [threads, kKvTileRows, heads]
  std::vector<float> tile_probs;    // [threads, heads, kKvTileRows]
  std::vector<float> tile_stats;    // [threads, 3, ScoreColumns(heads)] running max, running sum, correction

  // Absorbed attention split along the KV length (mla_decode_attention.h). S = kv_split_capacity
  // splits (partials) per wave, at least max_tokens, one token's splits at max_context, 4 per
  // thread; a wave's work items (runs of a token's splits) are at most S.
  std::vector<int32_t> absorbed_tokens;    // [N] tokens of the step in the absorbed form
  int kv_split_capacity;
  std::vector<KvSplitItem> kv_split_items;  // [<= S] the wave's work items, token-major
  std::vector<int32_t> kv_split_first;     // [N + 1] a wave token's first partial; then the wave's count
  std::vector<float> split_o;              // [S, heads, L] unnormalized partial o_lat, token-major
  std::vector<float> split_max_sum;        // [S, heads, 2] partial max score and exp-sum

  // MHA-form prefill of one segment (mla_prefill_attention.cc). C = kMhaKvRows, B = kMhaQueryRows.
  std::vector<float> mha_q;        // [heads, N, nope + R] queries, q_pe rotated
  std::vector<float> mha_state;    // [N, heads, 2] running max score and exp-sum
  std::vector<float> mha_rows;     // [C, L + R] a KV block's cache rows, dequantized once
  std::vector<float> mha_ckv;      // [C, L] the block's latents, contiguous for the matmul
  std::vector<float> mha_k;        // [threads, C, nope + R] one head's keys [k_nope | k_pe]
  std::vector<float> mha_kp;       // [threads, C / 16, nope + R, 16] the same as panels (F32 or BF16)
  std::vector<float> mha_v;        // [threads, C, v] one head's values
  std::vector<float> mha_vp;       // [threads, v / 16, C, 16] values transposed, as panels (F32 or BF16)
  std::vector<float> mha_scores;   // [threads, B, C] scores, then probabilities
  std::vector<float> mha_pv;       // [threads, B, v] one query block's probabilities @ values
  std::vector<float> router_scratch;  // [threads, 2 * n_routed_experts + n_group]
  // Tensor parallelism only (empty on one rank; sized by Model::Load):
  std::vector<float> tp_stage;  // [ranks' blocks] an all-gather's blocks, [n, cols of rank r] each
  std::vector<float> tp_full;   // [N, max(heads * v, inter)] a gathered intermediate
  std::vector<float> tp_local;  // [N, H] or [kTpLogitsRows, vocab of this rank] a shard's product
  std::vector<float> gemm_activations;  // a prefill matmul's packed input and threads' scratch (ops.h, GemmScratchFloats)
};

}  // namespace mlaserve
