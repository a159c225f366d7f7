// Absorbed-form MLA attention over the cache, split along the KV length (flash-decoding).
// A query token's context [0, context) is cut into splits of S = LatentAttentionShape::split_rows(context)
// positions ([s * S, (s + 1) * S), the last one clipped). Each split yields, per head,
// a partial softmax (max, sum, unnormalized o_lat[L]); the partials are merged with log-sum-exp in
// split order. The splits depend only on positions and the merge order is fixed, so a token's
// result is the same whatever shares its step, however its prompt was chunked and however many
// threads ran it: this path is deterministic in every mode.
#pragma once

#include <algorithm>
#include <span>

#include "core/types.h"
#include "kernels/kernels.h"
#include "kvcache/kv_storage.h"
#include "model/workspace.h"

namespace mlaserve {

// Positions per KV split, the shortest: a multiple of the tile (one tile), so a split's tiles are
// the tiles of the whole context. 128 splits a 272-position context 128 + 128 + 16 over two
// threads where 256 left one thread 256 rows and the other 16: attention over the cache 0.17-0.22
// ms a step instead of 0.23 (`bench --prompt-len 256`, reference shape, Q8_0, two alternating
// rounds). The partials' scratch is sized for splits of this length (Workspace::split_o: ~335 MB
// at DeepSeek-V3's 163,840 positions and 128 heads). LatentAttentionShape::split_rows() takes
// longer ones where partials are small and the context long.
inline constexpr int kKvSplitRows = 128;
static_assert(kKvSplitRows % kKvTileRows == 0);
// Longer splits where a split's partial (heads x L fp32, every rank's heads) fits in this many
// bytes and the context has at least kLongSplitMinContext positions: a split of several tiles
// reloads and corrects its partial once a tile, cheap while it stays in L1, and the merge, which
// reads every split's partial back from memory, reads a quarter of them: at 16 heads it had ~18%
// of the attention over a 3.7K context (perf of `bench --prompt-len 3700 --decode-tokens 390`,
// reference shape). Shorter contexts keep splits of 128, which share a lone request's few rows
// out evenly: with 512 everywhere, 256-320 positions took 0.26-0.33 ms a step instead of
// 0.17-0.19, 600-664 took 0.33-0.41 instead of 0.30-0.36 (docs/benchmarks.md).
inline constexpr int64_t kLongSplitMaxPartialBytes = 32 * 1024;
inline constexpr int kLongKvSplitRows = 4 * kKvSplitRows;
static_assert(kLongKvSplitRows % kKvTileRows == 0);
inline constexpr int kLongSplitMinContext = 4 * kLongKvSplitRows;

// Splits per work item when `num_splits` splits (every token's of a wave) share `threads`
// threads: few enough items that each split's first rows arrive while the previous split of the
// item computes (AttendLatentSplits runs an item as one tile pipeline), enough (4 a thread) that
// the threads finish together. It changes no result: a split's partial is the same whichever item
// holds it.
inline constexpr int kMaxSplitsPerItem = 8;
inline int SplitsPerItem(int num_splits, int threads) {
  return std::clamp(num_splits / (4 * std::max(1, threads)), 1, kMaxSplitsPerItem);
}

struct LatentAttentionShape {
  int heads;
  int latent_dim;  // L = kv_lora_rank
  int rope_dim;    // R = qk_rope_head_dim
  // Scores as one product (gemm_f32) rather than a dot product per (row, head): chosen by the
  // model's heads, not a tensor-parallel rank's, so every rank computes a score as one rank does.
  bool gemm_scores;
  // The model's heads, every rank's together (0: `heads`): whether a table multiplies the heads
  // in bf16 (LatentRowsInBf16) is decided by them, so a rank's heads compute as one rank's do.
  int model_heads = 0;
  int row_dim() const { return latent_dim + rope_dim; }
  int all_heads() const { return model_heads > 0 ? model_heads : heads; }
  // Positions per KV split of a token whose context is `context` positions: decided by the
  // model's heads and the context alone, so every rank splits as one process does and a token's
  // result depends on its positions only.
  int split_rows(int context) const {
    const bool long_splits = int64_t(all_heads()) * latent_dim * 4 <= kLongSplitMaxPartialBytes &&
                             context >= kLongSplitMinContext;
    return long_splits ? kLongKvSplitRows : kKvSplitRows;
  }
  int num_splits(int context) const {
    const int rows = split_rows(context);
    return (context + rows - 1) / rows;
  }
};

// Columns of the scores product for `heads` heads: whole vectors of 16 (LatentScratch's q_t
// and scores hold this many columns).
inline int ScoreColumns(int heads) { return (heads + 15) / 16 * 16; }

// Per-thread buffers of AttendLatentRows and AttendLatentSplits.
struct LatentScratch {
  float* tile;    // [kKvTileRows, L + R] dequantized cache rows (bf16 kernels: widened bf16 rows)
  float* q_t;     // [L + R, ScoreColumns(heads)] the query, transposed (gemm_scores; else [L + R, heads]);
                  // bf16 rows: the packed query (LatentQueryWords uint32)
  float* scores;  // [kKvTileRows, ScoreColumns(heads)] (gemm_scores; else [kKvTileRows, heads])
  float* probs;   // [heads, kKvTileRows]
  float* stats;   // [3, ScoreColumns(heads)] bf16 rows: running max, running sum, correction
};

// Whether AttendLatentRows multiplies rows stored in `format` as bf16 through the table's
// heads-in-lanes kernels (KernelSet::latent_*: the query and the probabilities rounded to bf16,
// bf16 x bf16 products, fp32 sums; kernels/latent_attention.h): rows whose values are bf16
// numbers (bf16 as stored; fp8_e4m3 and fp8_ds_mla widened exactly, kvcache/kv_widen_bf16.h), a
// shape the kernels take, and a table that multiplies the model's heads in bf16. Else rows are
// dequantized to an fp32 tile and multiplied in fp32 (gemm_f32).
bool LatentRowsInBf16(const KernelSet& k, KvFormat format, const LatentAttentionShape& shape);

// One token's partial attention over cache rows [begin, end) of `layer`, every head at once:
// rows are dequantized a tile at a time (kKvTileRows positions, read page by page) and each tile
// serves every head: scores = tile @ q_lat^T, then an online softmax, then o += p @ tile.
//   q_lat:   [heads, L + R] absorbed query (q_nope @ W_UK | rotated q_pe)
//   o:       [heads, L] out: sum_r exp(score_r - max) * c_kv_r (not normalized)
//   max_sum: [heads, 2] out: (max score, sum_r exp(score_r - max))
// Scores are q_lat . row * scale. A head's result depends only on its query and the rows.
void AttendLatentRows(const KernelSet& k, const KvHostRows& kv, int layer, std::span<const PageId> pages,
                      int begin, int end, const LatentAttentionShape& shape, const float* q_lat, float scale,
                      const LatentScratch& scratch, float* o, float* max_sum);

// Splits [first_split, first_split + num_splits) of a token's context [0, context), in order, on
// the calling thread (only those the context has; none past it is written): split s's partial
// in o_splits[s - first_split] ([heads, L]) and max_sum_splits[s - first_split] ([heads, 2]),
// bit for bit what AttendLatentRows gives over the split's rows alone. The bf16 path runs one
// tile pipeline through them (the next split's first rows fetched while the previous split's
// last tile computes) and packs the query into scratch.q_t, unless query_packed: the caller's
// previous call on this scratch packed this same q_lat (same shape, values unchanged since), as a
// thread's next item of the same token (a 128-head query is ~147 KB packed: once per thread and
// token, not once per item). The fp32 path ignores query_packed.
void AttendLatentSplits(const KernelSet& k, const KvHostRows& kv, int layer, std::span<const PageId> pages,
                        int context, int first_split, int num_splits, const LatentAttentionShape& shape,
                        const float* q_lat, float scale, const LatentScratch& scratch, bool query_packed,
                        float* o_splits, float* max_sum_splits);

// out[L] = head `head`'s softmax-weighted latent over num_splits partials, merged in split order:
// m = max_s m_s; out = (sum_s exp(m_s - m) * o_s) / (sum_s exp(m_s - m) * sum_s).
//   o_splits:       [num_splits, heads, L]
//   max_sum_splits: [num_splits, heads, 2]
void MergeLatentSplits(const KernelSet& k, const LatentAttentionShape& shape, int head, int num_splits,
                       const float* o_splits, const float* max_sum_splits, float* out);

}  // namespace mlaserve
