// Multi-head latent attention: the projections shared by both forms, and the choice of form per
// segment. Per token:
//   q        = q_b(norm(q_a(x)))  or q_proj(x)          [heads, nope + rope]
//   c_kv|k_pe = kv_a(x);  c_kv = norm(c_kv);  k_pe = rope(k_pe)   -> the cache row [L + R]
// so the cache holds only [c_kv | k_pe] per token per layer, shared by every head. Then either
// the absorbed form (mla_decode_attention.cc: decode, and everything in deterministic mode)
//   q_lat[h] = [q_nope[h] @ W_UK[h] | rope(q_pe[h])]    [heads, L + R]
//   score    = q_lat[h] . row_t * softmax_scale,  o_lat[h] = sum_t p_t * c_kv_t   [heads, L]
//   out[h]   = W_UV[h] @ o_lat[h]
// or the MHA form for prompt chunks (mla_prefill_attention.cc), which decompresses k and v per
// head from the cache; then proj = o_proj(out).
#include "kvcache/kv_storage.h"
#include "model/absorbed_weights.h"
#include "model/model.h"

namespace mlaserve {

void Model::Attention(const ComputeContext& ctx, const KvHostRows& kv, const AttentionWeights& w, int layer_index,
                      int n, std::span<const ForwardSegment> segments) {
  const ModelConfig& c = config_;
  Workspace& ws = workspace_;
  const KernelSet& k = *ctx.kernels;
  const int heads = local_heads_, nope = c.qk_nope_head_dim;  // this rank's heads
  const int L = c.kv_lora_rank, row_dim = c.kv_cache_dim(), v_dim = c.v_head_dim;
  PhaseClock clock(timings_);

  // Queries. q_a and kv_a read the same input: one dispatch for both (as SGLang's
  // fused_qkv_a_proj) where they take the same packed activations (one packing, or one int8
  // quantization, serves both); a GGUF file that mixes their types gets two products, each with
  // its own packing (MatMulPair would pack neither).
  const bool fused_qkv_a = c.q_lora_rank > 0 && SharePackedActivations(w.q_a, w.kv_a);
  if (c.q_lora_rank > 0) {
    if (fused_qkv_a) {
      MatMulPair(ctx, ws.normed.data(), n, w.q_a, w.kv_a, ws.q_a.data(), ws.kv_a.data());
    } else {
      MatMul(ctx, ws.normed.data(), n, w.q_a, ws.q_a.data());
    }
    ForTokenRanges(n, [&](int begin, int end, int) {
      for (int t = begin; t < end; ++t) {
        float* r = ws.q_a.data() + int64_t(t) * c.q_lora_rank;
        k.rms_norm(r, w.q_a_norm.data(), c.q_lora_rank, c.rms_norm_eps, r);
      }
    });
    MatMul(ctx, ws.q_a.data(), n, w.q_b, ws.q.data());
  } else {
    MatMul(ctx, ws.normed.data(), n, w.q_proj, ws.q.data());
  }

  // The new tokens' cache rows: normalised latent and rotated rope key, quantized once into the
  // storage's format as they are written (tokens write distinct rows, so threads may split them).
  if (!fused_qkv_a) MatMul(ctx, ws.normed.data(), n, w.kv_a, ws.kv_a.data());
  ForTokenRanges(n, [&](int begin, int end, int) {
    for (int t = begin; t < end; ++t) {
      const ForwardSegment& seg = segments[size_t(token_segments_[size_t(t)])];
      const int pos = token_positions_[size_t(t)];
      float* row = ws.kv_a.data() + int64_t(t) * row_dim;  // [L + R], normalised in place
      k.rms_norm(row, w.kv_a_norm.data(), L, c.rms_norm_eps, row);
      rope_.Apply(row + L, pos);
      kv.WriteRow(layer_index, seg.pages, pos, row);
    }
  });
  clock.Add(&ForwardTimings::projections_ns);

  // Each segment in its form: the MHA form for long enough prompt chunks (not in deterministic
  // mode), the absorbed form for the rest. Both write attn_out [n, heads * v].
  int num_absorbed = 0;
  for (int s = 0, first_token = 0; s < int(segments.size()); first_token += segments[size_t(s)].num_tokens, ++s) {
    if (UseMhaPrefill(segments[size_t(s)])) continue;
    for (int i = 0; i < segments[size_t(s)].num_tokens; ++i) {
      ws.absorbed_tokens[size_t(num_absorbed++)] = first_token + i;
    }
  }
  const std::span<const int32_t> absorbed(ws.absorbed_tokens.data(), size_t(num_absorbed));
  if (num_absorbed > 0) {
    AbsorbQueries(k, w, absorbed);
    clock.Add(&ForwardTimings::kv_b_ns);
    AbsorbedAttention(k, kv, layer_index, absorbed, segments);
    clock.Add(&ForwardTimings::attention_core_ns);
    // out[t, h, :] = W_UV[h] @ o_lat[h, t, :], one head per work item, over runs of consecutive
    // absorbed tokens (each token's product is the same whatever the run: batch-invariant).
    const int64_t kv_b_rows_per_head = nope + v_dim;
    pool_.ParallelFor(heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t h = begin; h < end; ++h) {
        for (size_t i = 0, run = 0; i < absorbed.size(); i += run) {
          const int32_t t0 = absorbed[i];
          for (run = 1; i + run < absorbed.size() && absorbed[i + run] == t0 + int32_t(run);) ++run;
          const float* o_lat = ws.o_lat.data() + (h * ws.max_tokens + t0) * L;
          float* out = ws.attn_out.data() + int64_t(t0) * heads * v_dim + h * v_dim;
          if (HasPanelCopies(w)) {  // the head's W_UV in panels (model/absorbed_weights.h)
            k.matmul_panels(o_lat, int64_t(run), w.uv[size_t(h)], 0, w.uv[size_t(h)].num_panels(), out,
                            int64_t(heads) * v_dim);
          } else {
            k.matmul_rows(o_lat, int64_t(run), w.kv_b.Slice(h * kv_b_rows_per_head + nope, v_dim), 0, v_dim, out,
                          int64_t(heads) * v_dim);
          }
        }
      }
    });
    clock.Add(&ForwardTimings::kv_b_ns);
  }
  for (int s = 0, first_token = 0; s < int(segments.size()); first_token += segments[size_t(s)].num_tokens, ++s) {
    if (UseMhaPrefill(segments[size_t(s)])) {
      MhaPrefillAttention(k, w, kv, layer_index, first_token, segments[size_t(s)], ctx.gemm_scratch);
      clock.Add(&ForwardTimings::attention_core_ns);
    }
  }
  if (tp_ == nullptr) {
    MatMul(ctx, ws.attn_out.data(), n, w.o_proj, ws.proj.data());
    clock.Add(&ForwardTimings::projections_ns);
    return;
  }
  // Tensor parallelism: every rank's heads, then o_proj's rows of this rank, then every rank's.
  GatherColumns(ws.attn_out.data(), n, tp_attn_counts_, ws.tp_full.data(), false);
  MatMul(ctx, ws.tp_full.data(), n, w.o_proj, ws.tp_local.data());
  GatherColumns(ws.tp_local.data(), n, RowShardCounts(c.hidden_size, w.o_proj), ws.proj.data(), false);
  clock.Add(&ForwardTimings::projections_ns);
}

}  // namespace mlaserve
