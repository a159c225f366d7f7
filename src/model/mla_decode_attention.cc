// Absorbed-form MLA attention (decode, and every token in deterministic mode): W_UK applied
// head-major for the step's tokens, then attention over the cache split along the KV length
// (flash-decoding, mla_decode_attention.h), then the splits merged in order.
#include "model/mla_decode_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "kernels/latent_attention.h"
#include "kvcache/kv_widen_bf16.h"
#include "model/absorbed_weights.h"
#include "model/model.h"

namespace mlaserve {
namespace {

// Scores of a tile as one product tile @ q_lat^T need a vector of heads (gemm_f32 runs columns
// past its last full vector one at a time); fewer heads take a dot product per (row, head).
constexpr int kGemmScoreMinHeads = 16;

static_assert(kKvTileRows <= kLatentSumMaxRows, "latent_sum takes a tile at a time");

// Heads in lanes over bf16 rows (KernelSet::latent_*, kernels/latent_attention.h): bf16 pages
// are read where they are stored; fp8 ones are widened exactly into the tile first (a tile in
// cache, never the context), their tensor scale applied to the scores and the output instead.
// The queries are rounded to bf16 and packed once per call, or not at all where the caller says
// the scratch holds them packed (query_packed: AttendLatentSplits).
//
// Rows [begin, end) (begin a multiple of kKvTileRows) as consecutive partials of `part_rows`
// positions each (a multiple of kKvTileRows; the last one fewer): partial j's softmax starts
// afresh, its output goes to o + j * heads * L and its statistics to max_sum + j * heads * 2,
// exactly as a call over its rows alone would give them. One tile pipeline runs through all of
// them: while a tile is summed, the next one's rows (the next partial's first ones too) are
// fetched. No rows: one empty partial.
void AttendBf16Rows(const KernelSet& k, const KvHostRows& kv, int layer, std::span<const PageId> pages, int begin,
                    int end, int part_rows, const LatentAttentionShape& shape, const float* q_lat, float scale,
                    const LatentScratch& scratch, bool query_packed, float* o, float* max_sum) {
  const int heads = shape.heads, L = shape.latent_dim, row_dim = shape.row_dim();
  MLA_CHECK(begin % kKvTileRows == 0 && part_rows > 0 && part_rows % kKvTileRows == 0);
  if (begin >= end) {
    std::fill(o, o + int64_t(heads) * L, 0.0f);
    for (int h = 0; h < heads; ++h) {
      max_sum[2 * h] = -std::numeric_limits<float>::infinity();
      max_sum[2 * h + 1] = 0.0f;
    }
    return;
  }
  const int64_t hp = LatentHeadsPadded(heads);
  const bool in_place = kv.format() == KvFormat::kBF16;
  const float value_scale = KvWidenedScale(kv.format(), kv.tensor_scale(layer));
  // Float scratch used as words (written by may_alias stores, memcpy and intrinsics; nothing on
  // this path reads either buffer as float).
  auto* q_pack = reinterpret_cast<uint32_t*>(scratch.q_t);
  auto* tile = reinterpret_cast<uint16_t*>(scratch.tile);  // [kKvTileRows, row_dim] widened rows
  float* run_max = scratch.stats;
  float* run_sum = scratch.stats + hp;
  float* corr = scratch.stats + 2 * hp;
  // Where a tile's rows are stored, for this tile and the next (which latent_scores and latent_sum
  // fetch into L2 as they compute), and the bf16 rows the kernels read: the stored ones, or the tile's.
  const uint16_t* stored[2][kKvTileRows];
  const uint16_t* tile_rows[kKvTileRows];
  for (int r = 0; r < kKvTileRows; ++r) tile_rows[r] = tile + int64_t(r) * row_dim;
  const int64_t row_bytes = int64_t(kv.row_bytes());
  const int page_size = kv.page_size();
  auto point = [&](int p0, const uint16_t** out) {  // page by page: one division a page, not a row
    const int n = std::min(kKvTileRows, end - p0);
    for (int r = 0; r < n;) {
      const std::byte* row = kv.Row(layer, pages, p0 + r);
      for (const int page_end = std::min(n, r + page_size - (p0 + r) % page_size); r < page_end; ++r) {
        out[r] = reinterpret_cast<const uint16_t*>(row);
        row += row_bytes;
      }
    }
    return n;
  };
  int n = point(begin, stored[0]);
  // The first tile: fetched while the query is packed.
  RowLinePacer<PrefetchIntoL2>(RowPrefetch{.rows = stored[0], .count = n, .bytes = row_bytes}).StepAll();
  if (!query_packed) k.latent_pack_query(q_lat, heads, row_dim, q_pack);
  int t = 0;  // which of `stored` holds this tile
  for (int part_begin = begin; part_begin < end;
       part_begin += part_rows, o += int64_t(heads) * L, max_sum += int64_t(heads) * 2) {
    std::fill(run_max, run_max + hp, -std::numeric_limits<float>::infinity());
    std::fill(run_sum, run_sum + hp, 0.0f);
    // Tiles as AttendF32Rows's: kKvTileRows positions from a multiple of it; the first one's sum
    // starts o afresh (no correction: o is not read).
    for (int p0 = part_begin, part_end = std::min(end, part_begin + part_rows); p0 < part_end; t ^= 1) {
      const int next_n = p0 + n < end ? point(p0 + n, stored[t ^ 1]) : 0;
      if (!in_place) {
        for (int r = 0, count = 0; r < n; r += count) {  // page by page
          const int p = p0 + r;
          count = std::min(n - r, (p / page_size + 1) * page_size - p);
          WidenKvRowsBf16(kv.format(), reinterpret_cast<const std::byte*>(stored[t][r]), count, kv.row_bytes(), L,
                          shape.rope_dim, tile + int64_t(r) * row_dim);
        }
      }
      const uint16_t* const* rows = in_place ? stored[t] : tile_rows;
      RowPrefetch next{.rows = stored[t ^ 1], .count = next_n, .bytes = row_bytes};
      k.latent_scores(q_pack, hp, rows, n, row_dim, scratch.scores, next);
      k.softmax_columns(scratch.scores, n, hp, scale * value_scale, run_max, run_sum, corr);
      k.latent_sum(scratch.scores, hp, heads, p0 == part_begin ? nullptr : corr, rows, n, L, o, next);
      p0 += n;
      n = next_n;
    }
    if (value_scale != 1.0f) {
      for (int64_t i = 0; i < int64_t(heads) * L; ++i) o[i] *= value_scale;
    }
    for (int h = 0; h < heads; ++h) {
      max_sum[2 * h] = run_max[h];
      max_sum[2 * h + 1] = run_sum[h];
    }
  }
}

// The fp32 path: rows dequantized to an fp32 tile, scores by gemm_f32 (or a dot product per row
// and head), sums by gemm_f32.
void AttendF32Rows(const KernelSet& k, const KvHostRows& kv, int layer, std::span<const PageId> pages, int begin,
                   int end, const LatentAttentionShape& shape, const float* q_lat, float scale,
                   const LatentScratch& scratch, float* o, float* max_sum) {
  const int heads = shape.heads, L = shape.latent_dim, row_dim = shape.row_dim();
  // Score columns: the heads, padded with zero queries to whole vectors for the product (a
  // tensor-parallel rank's 8 heads still run as one vector, as 16 do on one rank).
  const int cols = shape.gemm_scores ? ScoreColumns(heads) : heads;
  for (int h = 0; h < cols; ++h) {
    if (h < heads) {
      max_sum[2 * h] = -std::numeric_limits<float>::infinity();
      max_sum[2 * h + 1] = 0.0f;
    }
    for (int i = 0; i < row_dim; ++i) scratch.q_t[int64_t(i) * cols + h] = h < heads ? q_lat[int64_t(h) * row_dim + i] : 0.0f;
  }
  std::fill(o, o + int64_t(heads) * L, 0.0f);
  for (int p0 = begin, rows = 0; p0 < end; p0 += rows) {
    // A tile is kKvTileRows positions (fewer at the end), read page by page. Splits start at
    // multiples of kKvTileRows, so a split's tiles are the whole context's, whatever the page
    // size: the tiles, and so the sums, depend on positions only.
    rows = std::min(kKvTileRows, end - p0);
    for (int r = 0, count = 0; r < rows; r += count) {
      const int p = p0 + r;
      count = std::min(rows - r, (p / kv.page_size() + 1) * kv.page_size() - p);
      kv.ReadRows(layer, pages, p, count, scratch.tile + int64_t(r) * row_dim);
    }
    if (shape.gemm_scores) {
      k.gemm_f32(scratch.tile, row_dim, scratch.q_t, cols, scratch.scores, cols, rows, row_dim, cols, false);
    } else {
      for (int r = 0; r < rows; ++r) {
        for (int h = 0; h < heads; ++h) {
          scratch.scores[r * cols + h] =
              k.dot_f32(q_lat + int64_t(h) * row_dim, scratch.tile + int64_t(r) * row_dim, row_dim);
        }
      }
    }
    for (int h = 0; h < heads; ++h) {
      // The head's scaled scores, contiguous, then their exponentials in place (exp_sum).
      float* probs = scratch.probs + int64_t(h) * kKvTileRows;
      float tile_max = -std::numeric_limits<float>::infinity();
      for (int r = 0; r < rows; ++r) {
        probs[r] = scratch.scores[r * cols + h] * scale;
        tile_max = std::max(tile_max, probs[r]);
      }
      float* oh = o + int64_t(h) * L;
      float& running_max = max_sum[2 * h];
      float& running_sum = max_sum[2 * h + 1];
      const float new_max = std::max(running_max, tile_max);
      const float correction = std::exp(running_max - new_max);  // 0 on the first tile
      if (correction != 1.0f) {
        for (int i = 0; i < L; ++i) oh[i] *= correction;
      }
      running_sum = running_sum * correction + k.exp_sum(probs, rows, new_max);
      running_max = new_max;
    }
    k.gemm_f32(scratch.probs, kKvTileRows, scratch.tile, row_dim, o, L, heads, rows, L, true);
  }
}

}  // namespace

bool LatentRowsInBf16(const KernelSet& k, KvFormat format, const LatentAttentionShape& shape) {
  const int heads = shape.all_heads();
  return k.latent_scores != nullptr && k.bf16_min_tokens > 0 && heads >= k.bf16_min_tokens &&
         KvRowsWidenToBf16(format) && LatentShapeOk(shape.row_dim(), shape.latent_dim, heads);
}

void AttendLatentRows(const KernelSet& k, const KvHostRows& kv, int layer, std::span<const PageId> pages,
                      int begin, int end, const LatentAttentionShape& shape, const float* q_lat, float scale,
                      const LatentScratch& scratch, float* o, float* max_sum) {
  if (LatentRowsInBf16(k, kv.format(), shape)) {  // one partial: all the rows
    const int part_rows = std::max(kKvTileRows, (end - begin + kKvTileRows - 1) / kKvTileRows * kKvTileRows);
    return AttendBf16Rows(k, kv, layer, pages, begin, end, part_rows, shape, q_lat, scale, scratch,
                          /*query_packed=*/false, o, max_sum);
  }
  AttendF32Rows(k, kv, layer, pages, begin, end, shape, q_lat, scale, scratch, o, max_sum);
}

void AttendLatentSplits(const KernelSet& k, const KvHostRows& kv, int layer, std::span<const PageId> pages,
                        int context, int first_split, int num_splits, const LatentAttentionShape& shape,
                        const float* q_lat, float scale, const LatentScratch& scratch, bool query_packed,
                        float* o_splits, float* max_sum_splits) {
  const int split_rows = shape.split_rows(context);
  const int begin = first_split * split_rows;
  const int end = std::min(context, (first_split + num_splits) * split_rows);
  MLA_CHECK(num_splits >= 1 && begin < end);
  if (LatentRowsInBf16(k, kv.format(), shape)) {
    return AttendBf16Rows(k, kv, layer, pages, begin, end, split_rows, shape, q_lat, scale, scratch, query_packed,
                          o_splits, max_sum_splits);
  }
  for (int s = 0; s < num_splits && begin + s * split_rows < end; ++s) {  // the splits the context has
    const int split_begin = begin + s * split_rows;
    AttendF32Rows(k, kv, layer, pages, split_begin, std::min(end, split_begin + split_rows), shape, q_lat, scale,
                  scratch, o_splits + int64_t(s) * shape.heads * shape.latent_dim,
                  max_sum_splits + int64_t(s) * shape.heads * 2);
  }
}

void MergeLatentSplits(const KernelSet& k, const LatentAttentionShape& shape, int head, int num_splits,
                       const float* o_splits, const float* max_sum_splits, float* out) {
  const int heads = shape.heads, L = shape.latent_dim;
  auto stats = [&](int s) { return max_sum_splits + (int64_t(s) * heads + head) * 2; };
  float m = -std::numeric_limits<float>::infinity();
  for (int s = 0; s < num_splits; ++s) m = std::max(m, stats(s)[0]);
  std::fill(out, out + L, 0.0f);
  float sum = 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    const float weight = std::exp(stats(s)[0] - m);  // exactly 1 for a single split
    sum += weight * stats(s)[1];
    k.axpy_f32(weight, o_splits + (int64_t(s) * heads + head) * L, out, L);
  }
  const float inv = 1.0f / sum;
  for (int i = 0; i < L; ++i) out[i] *= inv;
}

void Model::AbsorbQueries(const KernelSet& k, const AttentionWeights& w, std::span<const int32_t> tokens) {
  const ModelConfig& c = config_;
  Workspace& ws = workspace_;
  const int heads = local_heads_, nope = c.qk_nope_head_dim, L = c.kv_lora_rank;
  const int row_dim = c.kv_cache_dim(), qk_dim = c.qk_head_dim();
  const int64_t kv_b_rows_per_head = nope + c.v_head_dim;
  if (HasTransposedCopies(w)) {
    // q_lat[t, h, :L] = W_UK^T[h] @ q_nope[t, h, :], a token at a time (each token's product is
    // its own: batch-invariant), through the head's copy (MultiplyAbsorbedQuery: one product, or
    // kv_b's grouped codes a group at a time with the query scaled by the group's W_UK scales).
    pool_.ParallelFor(heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t h = begin; h < end; ++h) {
        for (int32_t t : tokens) {
          const float* q_head = ws.q.data() + (int64_t(t) * heads + h) * qk_dim;
          float* q_lat = ws.q_lat.data() + (int64_t(t) * heads + h) * row_dim;
          MultiplyAbsorbedQuery(k, w, c, h, q_head, q_lat);
          std::copy(q_head + nope, q_head + qk_dim, q_lat + L);
          rope_.Apply(q_lat + L, token_positions_[size_t(t)]);
        }
      }
    });
    return;
  }
  // q_lat[t, h, :L] = sum_d q_nope[t, h, d] * W_UK[h][d, :]: rows outer, tokens inner, so each
  // W_UK row is read once per step for all tokens; every output sums d in order whatever the
  // tokens are (batch-invariant).
  pool_.ParallelFor(heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t h = begin; h < end; ++h) {
      for (int32_t t : tokens) {
        float* q_lat = ws.q_lat.data() + (int64_t(t) * heads + h) * row_dim;
        std::fill(q_lat, q_lat + L, 0.0f);
      }
      for (int d = 0; d < nope; ++d) {
        for (int32_t t : tokens) {
          const float q_nope_d = ws.q[size_t((int64_t(t) * heads + h) * qk_dim + d)];
          float* q_lat = ws.q_lat.data() + (int64_t(t) * heads + h) * row_dim;
          k.axpy_row(q_nope_d, w.kv_b, h * kv_b_rows_per_head + d, q_lat);
        }
      }
      for (int32_t t : tokens) {
        const float* q_head = ws.q.data() + (int64_t(t) * heads + h) * qk_dim;
        float* q_lat = ws.q_lat.data() + (int64_t(t) * heads + h) * row_dim;
        std::copy(q_head + nope, q_head + qk_dim, q_lat + L);
        rope_.Apply(q_lat + L, token_positions_[size_t(t)]);
      }
    }
  });
}

void Model::AbsorbedAttention(const KernelSet& k, const KvHostRows& kv, int layer, std::span<const int32_t> tokens,
                              std::span<const ForwardSegment> segments) {
  const ModelConfig& c = config_;
  Workspace& ws = workspace_;
  const LatentAttentionShape shape{.heads = local_heads_, .latent_dim = c.kv_lora_rank,
                                   .rope_dim = c.qk_rope_head_dim,
                                   .gemm_scores = c.num_attention_heads >= kGemmScoreMinHeads,
                                   .model_heads = c.num_attention_heads};
  const int heads = shape.heads, L = shape.latent_dim, row_dim = shape.row_dim();
  const int64_t score_cols = ScoreColumns(c.num_attention_heads);  // a thread's scratch (workspace.cc)
  const float scale = float(c.SoftmaxScale());
  // Waves of whole tokens whose splits fit the partials' scratch (capacity >= one token's splits
  // of the shortest length, kKvSplitRows).
  for (size_t first = 0; first < tokens.size();) {
    int num_splits = 0;
    size_t last = first;
    for (; last < tokens.size(); ++last) {
      const int splits = shape.num_splits(token_positions_[size_t(tokens[last])] + 1);
      if (num_splits + splits > ws.kv_split_capacity) break;
      ws.kv_split_first[last - first] = int32_t(num_splits);  // a token's partials follow the previous ones'
      num_splits += splits;
    }
    MLA_CHECK(last > first);  // the capacity holds one token's splits at max_context
    ws.kv_split_first[last - first] = int32_t(num_splits);  // so token j has first[j + 1] - first[j] splits
    const auto splits_of = [&](size_t j) { return ws.kv_split_first[j + 1] - ws.kv_split_first[j]; };
    const std::span<const int32_t> wave = tokens.subspan(first, last - first);
    // Work items of `group` consecutive splits of a token (the last one fewer).
    const int group = SplitsPerItem(num_splits, pool_.num_threads());
    int num_items = 0;
    for (size_t j = 0; j < wave.size(); ++j) {
      const int splits = splits_of(j);
      for (int s = 0; s < splits; s += group) {
        ws.kv_split_items[size_t(num_items++)] = {.token = int32_t(j), .split = s,
                                                  .count = std::min(group, splits - s)};
      }
    }
    // Threads take the next item as they finish.
    std::atomic<int> next_item{0};
    pool_.RunOnAll([&](int thread) {
      const LatentScratch scratch{.tile = ws.kv_tile.data() + int64_t(thread) * kKvTileRows * row_dim,
                                  .q_t = ws.q_lat_t.data() + int64_t(thread) * row_dim * score_cols,
                                  .scores = ws.tile_scores.data() + int64_t(thread) * kKvTileRows * score_cols,
                                  .probs = ws.tile_probs.data() + int64_t(thread) * heads * kKvTileRows,
                                  .stats = ws.tile_stats.data() + int64_t(thread) * 3 * score_cols};
      int packed_token = -1;  // whose query this thread's scratch holds packed (one token's items share it)
      for (int i = next_item.fetch_add(1, std::memory_order_relaxed); i < num_items;
           i = next_item.fetch_add(1, std::memory_order_relaxed)) {
        const KvSplitItem item = ws.kv_split_items[size_t(i)];
        const int t = wave[size_t(item.token)];
        const int64_t partial = ws.kv_split_first[size_t(item.token)] + item.split;
        AttendLatentSplits(k, kv, layer, segments[size_t(token_segments_[size_t(t)])].pages,
                           token_positions_[size_t(t)] + 1, item.split, item.count, shape,
                           ws.q_lat.data() + int64_t(t) * heads * row_dim, scale, scratch,
                           /*query_packed=*/packed_token == t, ws.split_o.data() + partial * heads * L,
                           ws.split_max_sum.data() + partial * heads * 2);
        packed_token = t;
      }
    });
    // Merge each (token, head) over its splits, in split order, into o_lat.
    pool_.ParallelFor(int64_t(wave.size()) * heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t w = begin; w < end; ++w) {
        const size_t j = size_t(w / heads);
        const int h = int(w % heads), t = wave[j], first_partial = ws.kv_split_first[j];
        MergeLatentSplits(k, shape, h, splits_of(j),
                          ws.split_o.data() + int64_t(first_partial) * heads * L,
                          ws.split_max_sum.data() + int64_t(first_partial) * heads * 2,
                          ws.o_lat.data() + (int64_t(h) * ws.max_tokens + t) * L);
      }
    });
    first = last;
  }
}

}  // namespace mlaserve
