// Multi-head latent attention in the absorbed form. Per token:
//   q        = q_b(norm(q_a(x)))  or q_proj(x)          [heads, nope + rope]
//   c_kv|k_pe = kv_a(x);  c_kv = norm(c_kv);  k_pe = rope(k_pe)   -> the cache row [L + R]
//   q_lat[h] = [q_nope[h] @ W_UK[h] | rope(q_pe[h])]    [heads, L + R]
//   score    = q_lat[h] . row_t * softmax_scale,  o_lat[h] = sum_t p_t * c_kv_t   [heads, L]
//   out[h]   = W_UV[h] @ o_lat[h];  proj = o_proj(out)
// so the cache holds only [c_kv | k_pe] per token per layer, shared by every head.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kvcache/kv_storage.h"
#include "model/model.h"

namespace mlaserve {

void Model::Attention(const ComputeContext& ctx, const KvHostRows& kv, int layer_index, int n,
                      std::span<const ForwardSegment> segments) {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[size_t(layer_index)].attn;
  Workspace& ws = workspace_;
  const KernelSet& k = *ctx.kernels;
  const int heads = c.num_attention_heads, nope = c.qk_nope_head_dim;
  const int L = c.kv_lora_rank, row_dim = c.kv_cache_dim(), v_dim = c.v_head_dim;
  const int qk_dim = c.qk_head_dim();

  // Queries.
  if (c.q_lora_rank > 0) {
    MatMul(ctx, ws.normed.data(), n, w.q_a, ws.q_a.data());
    for (int t = 0; t < n; ++t) {
      float* r = ws.q_a.data() + int64_t(t) * c.q_lora_rank;
      RmsNorm(r, w.q_a_norm.data(), c.q_lora_rank, c.rms_norm_eps, r);
    }
    MatMul(ctx, ws.q_a.data(), n, w.q_b, ws.q.data());
  } else {
    MatMul(ctx, ws.normed.data(), n, w.q_proj, ws.q.data());
  }

  // The new tokens' cache rows: normalised latent and rotated rope key, quantized once into the
  // storage's format as they are written.
  MatMul(ctx, ws.normed.data(), n, w.kv_a, ws.kv_a.data());
  for (int t = 0; t < n; ++t) {
    const ForwardSegment& seg = segments[size_t(token_segments_[size_t(t)])];
    const int pos = token_positions_[size_t(t)];
    float* row = ws.kv_a.data() + int64_t(t) * row_dim;  // [L + R], normalised in place
    RmsNorm(row, w.kv_a_norm.data(), L, c.rms_norm_eps, row);
    rope_.Apply(row + L, pos);
    kv.WriteRow(layer_index, seg.pages, pos, row);
  }

  // Absorbed queries: q_nope[h] @ W_UK[h] (rows of kv_b), then the rotated q_pe.
  const int64_t kv_b_rows_per_head = nope + v_dim;
  pool_.ParallelFor(int64_t(n) * heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int t = int(item / heads), h = int(item % heads);
      const float* q_head = ws.q.data() + (int64_t(t) * heads + h) * qk_dim;
      float* q_lat = ws.q_lat.data() + (int64_t(t) * heads + h) * row_dim;
      std::fill(q_lat, q_lat + L, 0.0f);
      for (int d = 0; d < nope; ++d) {
        k.axpy_row(q_head[d], w.kv_b, h * kv_b_rows_per_head + d, q_lat);
      }
      std::copy(q_head + nope, q_head + qk_dim, q_lat + L);
      rope_.Apply(q_lat + L, token_positions_[size_t(t)]);
    }
  });

  // Scores and latent outputs, reading the cache in its stored format: rows are dequantized a
  // tile (at most kKvTileRows rows of one page) at a time into per-thread scratch, and a
  // running (online) softmax folds each tile in, so no full-precision copy of a context ever
  // exists. One tile serves every head. Work items are (query token, group of heads): with
  // fewer tokens than threads (decode), the heads are split so every thread has work.
  const float scale = float(c.SoftmaxScale());
  const int num_threads = pool_.num_threads();
  const int head_groups = n >= num_threads ? 1 : std::min(heads, (num_threads + n - 1) / n);
  const int heads_per_group = (heads + head_groups - 1) / head_groups;
  pool_.RunOnAll([&](int thread) {
    float* tile = ws.kv_tile.data() + int64_t(thread) * kKvTileRows * row_dim;  // [tile, L + R]
    float* running_max = ws.softmax_state.data() + int64_t(thread) * 2 * heads;  // [heads]
    float* running_sum = running_max + heads;                                   // [heads]
    for (int item = thread; item < n * head_groups; item += num_threads) {
      const int t = item / head_groups;
      const int h_begin = (item % head_groups) * heads_per_group;
      const int h_end = std::min(heads, h_begin + heads_per_group);
      const std::span<const PageId> pages = segments[size_t(token_segments_[size_t(t)])].pages;
      const int context = token_positions_[size_t(t)] + 1;
      const float* q_lat = ws.q_lat.data() + int64_t(t) * heads * row_dim;
      for (int h = h_begin; h < h_end; ++h) {
        running_max[h] = -std::numeric_limits<float>::infinity();
        running_sum[h] = 0.0f;
        float* o = ws.o_lat.data() + (int64_t(h) * ws.max_tokens + t) * L;
        std::fill(o, o + L, 0.0f);
      }
      for (int p0 = 0, rows = 0; p0 < context; p0 += rows) {
        // Tiles never cross a page: clip at the page end (any page size), then move on by what
        // was read.
        const int page_end = (p0 / kv.page_size() + 1) * kv.page_size();
        rows = std::min({kKvTileRows, context - p0, page_end - p0});
        kv.ReadRows(layer_index, pages, p0, rows, tile);
        for (int h = h_begin; h < h_end; ++h) {
          float scores[kKvTileRows];
          float tile_max = -std::numeric_limits<float>::infinity();
          for (int r = 0; r < rows; ++r) {
            scores[r] = k.dot_f32(q_lat + h * row_dim, tile + int64_t(r) * row_dim, row_dim) * scale;
            tile_max = std::max(tile_max, scores[r]);
          }
          float* o = ws.o_lat.data() + (int64_t(h) * ws.max_tokens + t) * L;
          const float new_max = std::max(running_max[h], tile_max);
          const float correction = std::exp(running_max[h] - new_max);  // 0 on the first tile
          if (correction != 1.0f) {
            for (int i = 0; i < L; ++i) o[i] *= correction;
          }
          float sum = running_sum[h] * correction;
          for (int r = 0; r < rows; ++r) {
            const float weight = std::exp(scores[r] - new_max);
            sum += weight;
            k.axpy_f32(weight, tile + int64_t(r) * row_dim, o, L);
          }
          running_max[h] = new_max;
          running_sum[h] = sum;
        }
      }
      for (int h = h_begin; h < h_end; ++h) {
        float* o = ws.o_lat.data() + (int64_t(h) * ws.max_tokens + t) * L;
        const float inv = 1.0f / running_sum[h];
        for (int i = 0; i < L; ++i) o[i] *= inv;
      }
    }
  });

  // out[t, h, :] = W_UV[h] @ o_lat[h, t, :], one head per work item.
  pool_.ParallelFor(heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t h = begin; h < end; ++h) {
      const WeightMatrix w_uv = w.kv_b.Slice(h * kv_b_rows_per_head + nope, v_dim);
      k.matmul_rows(ws.o_lat.data() + h * ws.max_tokens * L, n, w_uv, 0, v_dim,
                    ws.attn_out.data() + h * v_dim, int64_t(heads) * v_dim);
    }
  });
  MatMul(ctx, ws.attn_out.data(), n, w.o_proj, ws.proj.data());
}

}  // namespace mlaserve
