// MLA prefill in the MHA form (not in deterministic mode: its sums run in another order than the
// absorbed form's, so a token's logits depend on how its prompt was chunked). For one segment's
// chunk, with prefix = the cached rows plus the new ones:
//   per KV block of kMhaKvRows rows, dequantized once:  c_kv [C, L], k_pe [C, R]
//   per head h:  k[h] = [c_kv @ W_UK[h]^T | k_pe]  [C, nope + R],  v[h] = c_kv @ W_UV[h]^T  [C, v]
//   per query block:  s = q k^T * scale (causal), online softmax, o = o * correction + p v
// Both products run through the kernel table's matmul_panels, with k[h] and v[h]^T packed as
// panels (the table's pack_f32_panels, else PackF32Panels): in bf16 where the table multiplies a
// query block with bf16 dot products (the host's fastest, kernel_choice.h), else in fp32.
// q = [q_nope | rope(q_pe)]; out[t, h, :] = o / sum is written to attn_out as the absorbed form
// writes it. Per pair of (query, key) this is (nope + R + v) multiply-adds per head instead of the
// absorbed form's (2 L + R), at the cost of decompressing every prefix row per head once.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/ops.h"
#include "kernels/pack.h"
#include "model/absorbed_weights.h"
#include "model/model.h"

namespace mlaserve {
namespace {

// Segments of fewer new tokens stay in the absorbed form.
constexpr int kMhaPrefillMinTokens = 32;
// Cache rows a thread dequantizes at a time into a block's keys (the grain of that ParallelFor,
// an eighth of kMhaKvRows: every thread of an 8-core host takes part).
constexpr int kMhaReadGrainRows = 64;

}  // namespace

bool Model::UseMhaPrefill(const ForwardSegment& seg) const {
  if (deterministic_ || seg.num_tokens < kMhaPrefillMinTokens) return false;
  // Multiply-adds per head: the MHA form decompresses every prefix row ((nope + v) L each), the
  // absorbed form absorbs every new token's query and output ((nope + v) L each too); per
  // (query, key) pair they cost (nope + R + v) and (2 L + R).
  const ModelConfig& c = config_;
  const double n = seg.num_tokens, prefix = seg.num_computed_tokens + seg.num_tokens;
  const double pairs = n * (prefix - (n - 1) / 2.0);
  const double decompress = double(c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank;
  const double mha = prefix * decompress + pairs * (c.qk_head_dim() + c.v_head_dim);
  const double absorbed = n * decompress + pairs * (2.0 * c.kv_lora_rank + c.qk_rope_head_dim);
  return mha < absorbed;
}

void Model::MhaPrefillAttention(const KernelSet& k, const AttentionWeights& w, const KvHostRows& kv, int layer,
                                int first_token, const ForwardSegment& seg, std::span<float> gemm_scratch) {
  const ModelConfig& c = config_;
  Workspace& ws = workspace_;
  const int heads = local_heads_, nope = c.qk_nope_head_dim, R = c.qk_rope_head_dim;
  const int L = c.kv_lora_rank, v_dim = c.v_head_dim, qk_dim = c.qk_head_dim(), row_dim = c.kv_cache_dim();
  const int n = seg.num_tokens, prefix = seg.num_computed_tokens + seg.num_tokens;
  const int64_t kv_b_rows_per_head = nope + v_dim, out_stride = int64_t(heads) * v_dim;
  const float scale = float(c.SoftmaxScale());
  constexpr int C = kMhaKvRows, B = kMhaQueryRows;
  // Keys and values as bf16 panels where the table multiplies a query block in bf16 (the host's
  // dot-product instructions), else fp32.
  const DType panel_dtype = k.bf16_min_tokens > 0 && B >= k.bf16_min_tokens ? DType::kBF16 : DType::kF32;
  const auto pack = k.pack_f32_panels != nullptr ? k.pack_f32_panels : PackF32Panels;

  // Queries per head, q_pe rotated; running softmax state and output start empty.
  pool_.ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t = first_token + i;
      for (int h = 0; h < heads; ++h) {
        const float* src = ws.q.data() + (t * heads + h) * qk_dim;
        float* q = ws.mha_q.data() + (int64_t(h) * ws.max_tokens + i) * qk_dim;
        std::copy(src, src + qk_dim, q);
        rope_.Apply(q + nope, token_positions_[size_t(t)]);
        float* state = ws.mha_state.data() + (t * heads + h) * 2;
        state[0] = -std::numeric_limits<float>::infinity();
        state[1] = 0.0f;
        std::fill_n(ws.attn_out.data() + t * out_stride + h * v_dim, v_dim, 0.0f);
      }
    }
  });

  for (int c0 = 0; c0 < prefix; c0 += C) {
    const int rows = std::min(C, prefix - c0);
    // The block's cache rows, dequantized once for every head and query (reads never cross a page).
    pool_.ParallelFor(rows, kMhaReadGrainRows, [&](int64_t begin, int64_t end) {
      for (int p = c0 + int(begin), count = 0; p < c0 + end; p += count) {
        const int page_end = (p / kv.page_size() + 1) * kv.page_size();
        count = std::min(c0 + int(end), page_end) - p;
        kv.ReadRows(layer, seg.pages, p, count, ws.mha_rows.data() + int64_t(p - c0) * row_dim);
      }
      for (int64_t r = begin; r < end; ++r) {
        std::copy_n(ws.mha_rows.data() + r * row_dim, L, ws.mha_ckv.data() + r * L);
      }
    });

    // With kv_b's per-head copies (model/absorbed_weights.h): the block's latents packed once for
    // every head's key products and once for the value products, where both products pay and the
    // scratch has room; one packing serves both where the copies share a layout (a split pair's
    // W_UK is F32 beside a W_UV in its block type: two). Else each product takes them unpacked.
    const bool copies = HasPanelCopies(w);
    const int threads = pool_.num_threads();
    float* packed_uk = nullptr;  // [uk_floats] the latents [rows, L] packed for W_UK's products
    float* packed_uv = nullptr;  // [uv_floats] ... for W_UV's (packed_uk where they share)
    int64_t packed_floats = 0;   // uk_floats + uv_floats: the thread scratch follows
    if (copies && PackedProductPays(k, rows, w.uk[0]) && PackedProductPays(k, rows, w.uv[0])) {
      const bool share = SharePackedActivations(w.uk[0], w.uv[0]);
      const int64_t uk_floats = PackedFloatsFor(k, rows, w.uk[0]);
      const int64_t uv_floats = share ? 0 : PackedFloatsFor(k, rows, w.uv[0]);
      if (uk_floats + uv_floats + threads * GemmThreadScratchFloats(rows) <= int64_t(gemm_scratch.size())) {
        packed_floats = uk_floats + uv_floats;
        packed_uk = gemm_scratch.data();
        packed_uv = share ? packed_uk : packed_uk + uk_floats;
        pool_.ParallelFor(GemmTiles(rows), 1, [&](int64_t begin, int64_t end) {
          k.pack_activations(ws.mha_ckv.data(), rows, w.uk[0], begin, end, packed_uk);
          if (!share) k.pack_activations(ws.mha_ckv.data(), rows, w.uv[0], begin, end, packed_uv);
        });
      }
    }
    std::atomic<int> next_head{0};
    pool_.RunOnAll([&](int thread) {
      // [GemmThreadScratchFloats(rows)] this thread's, after the packed latents
      float* product_scratch = packed_uk == nullptr ? nullptr
                                                    : gemm_scratch.data() + packed_floats +
                                                          int64_t(thread) * GemmThreadScratchFloats(rows);
      float* keys = ws.mha_k.data() + int64_t(thread) * C * qk_dim;      // [C, nope + R]
      float* values = ws.mha_v.data() + int64_t(thread) * C * v_dim;     // [C, v]
      float* scores = ws.mha_scores.data() + int64_t(thread) * B * C;    // [B, rows]
      float* pv = ws.mha_pv.data() + int64_t(thread) * B * v_dim;        // [B, v]
      void* keys_panels = ws.mha_kp.data() + int64_t(thread) * qk_dim * C;
      void* values_panels = ws.mha_vp.data() + int64_t(thread) * ((v_dim + kPanelRows - 1) / kPanelRows * kPanelRows) * C;
      for (int h = next_head.fetch_add(1, std::memory_order_relaxed); h < heads;
           h = next_head.fetch_add(1, std::memory_order_relaxed)) {
        // Decompress this head's keys and values for the block.
        if (copies) {  // the head's W_UK and W_UV in panels
          const WeightMatrix &uk = w.uk[size_t(h)], &uv = w.uv[size_t(h)];
          if (packed_uk != nullptr) {
            k.matmul_panels_packed(ws.mha_ckv.data(), packed_uk, product_scratch, rows, uk, 0, uk.num_panels(), keys,
                                   qk_dim);
            k.matmul_panels_packed(ws.mha_ckv.data(), packed_uv, product_scratch, rows, uv, 0, uv.num_panels(), values,
                                   v_dim);
          } else {
            k.matmul_panels(ws.mha_ckv.data(), rows, uk, 0, uk.num_panels(), keys, qk_dim);
            k.matmul_panels(ws.mha_ckv.data(), rows, uv, 0, uv.num_panels(), values, v_dim);
          }
        } else {
          k.matmul_rows(ws.mha_ckv.data(), rows, w.kv_b.Slice(h * kv_b_rows_per_head, nope), 0, nope, keys, qk_dim);
          k.matmul_rows(ws.mha_ckv.data(), rows, w.kv_b.Slice(h * kv_b_rows_per_head + nope, v_dim), 0, v_dim,
                        values, v_dim);
        }
        for (int r = 0; r < rows; ++r) {
          std::copy_n(ws.mha_rows.data() + int64_t(r) * row_dim + L, R, keys + int64_t(r) * qk_dim + nope);
        }
        // Both products as panels for the table's matmul: keys [rows x (nope + R)] (scores =
        // q @ keys^T) and values transposed [v x rows] (p @ values), in bf16 where the table
        // multiplies query blocks in bf16 (its dot-product instructions), else in fp32.
        const WeightMatrix key_panels = pack(keys, rows, qk_dim, qk_dim, 1, panel_dtype, keys_panels);
        const WeightMatrix value_panels = pack(values, v_dim, rows, 1, v_dim, panel_dtype, values_panels);

        for (int q0 = 0; q0 < n; q0 += B) {
          const int num_queries = std::min(B, n - q0);
          const int first_position = seg.num_computed_tokens + q0;
          const int last_position = first_position + num_queries - 1;
          if (last_position < c0) continue;  // every key of the block is in these queries' future
          const int keys_needed = std::min(rows, last_position + 1 - c0);
          float* out = ws.attn_out.data() + (int64_t(first_token) + q0) * out_stride + h * v_dim;
          // The block's outputs (a row of every query, out_stride apart: far apart in memory, and
          // last touched a KV block ago) fetched while the scores multiply.
          for (int qi = 0; qi < num_queries; ++qi) {
            const auto row = reinterpret_cast<uintptr_t>(out + int64_t(qi) * out_stride);
            for (uintptr_t line = row & ~uintptr_t(63); line < row + uintptr_t(v_dim) * 4; line += 64) {
              __builtin_prefetch(reinterpret_cast<const void*>(line), 1);
            }
          }
          // scores [num_queries, rows]: the keys the queries can see (a view of the first panels).
          WeightMatrix needed = key_panels;
          needed.rows = keys_needed;
          k.matmul_panels(ws.mha_q.data() + (int64_t(h) * ws.max_tokens + q0) * qk_dim, num_queries, needed, 0,
                          needed.num_panels(), scores, rows);
          float correction[B];  // [num_queries] what each query's running output is multiplied by before this block's
          for (int qi = 0; qi < num_queries; ++qi) {
            float* s = scores + int64_t(qi) * rows;
            float* state = ws.mha_state.data() + ((int64_t(first_token) + q0 + qi) * heads + h) * 2;
            // Causal: this query sees keys at positions <= its own.
            const int visible = std::clamp(first_position + qi + 1 - c0, 0, keys_needed);
            const float block_max = k.scale_max(s, visible, scale);
            std::fill(s + visible, s + rows, 0.0f);  // p @ values sums over every row of the block
            correction[qi] = 1.0f;
            if (visible == 0) continue;
            const float new_max = std::max(state[0], block_max);
            correction[qi] = std::exp(state[0] - new_max);  // 0 on the first block
            const float sum = k.exp_sum(s, visible, new_max);
            state[0] = new_max;
            state[1] = state[1] * correction[qi] + sum;
          }
          // o = o * correction + p @ values over the block's rows, one pass over o.
          k.matmul_panels(scores, num_queries, value_panels, 0, value_panels.num_panels(), pv, v_dim);
          for (int qi = 0; qi < num_queries; ++qi) {
            k.scale_add_f32(correction[qi], pv + int64_t(qi) * v_dim, out + int64_t(qi) * out_stride, v_dim);
          }
        }
      }
    });
  }

  pool_.ParallelFor(int64_t(n) * heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = first_token + item / heads, h = item % heads;
      const float inv = 1.0f / ws.mha_state[size_t((t * heads + h) * 2 + 1)];
      float* o = ws.attn_out.data() + t * out_stride + h * v_dim;
      for (int i = 0; i < v_dim; ++i) o[i] *= inv;
    }
  });
}

}  // namespace mlaserve
