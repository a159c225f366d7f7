#include "model/absorbed_weights.h"

#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/pack.h"

namespace mlaserve {
namespace {

size_t AlignUp64(size_t n) { return (n + 63) / 64 * 64; }

// Scale groups of a W_UK row the query scaling takes (stack scratch): kv_lora 1024 in groups of 16.
constexpr int64_t kMaxScaleGroups = 64;

template <class Fn>
void ForEachAttention(ModelWeights& w, Fn&& fn) {
  for (LayerWeights& layer : w.layers) fn(layer.attn);
  if (w.has_mtp) fn(w.mtp.block.attn);
}

// A head's W_UK rows [nope, kv_lora] and W_UV rows [v, kv_lora] as views of kv_b.
WeightMatrix UkRows(const AttentionWeights& a, const ModelConfig& c, int64_t h) {
  return a.kv_b.Slice(h * (c.qk_nope_head_dim + c.v_head_dim), c.qk_nope_head_dim);
}
WeightMatrix UvRows(const AttentionWeights& a, const ModelConfig& c, int64_t h) {
  return a.kv_b.Slice(h * (c.qk_nope_head_dim + c.v_head_dim) + c.qk_nope_head_dim, c.v_head_dim);
}

// The copies pay where both pack: dense, or int8 groups whose groups hold whole panels of W_UK^T
// rows (the query is scaled per group) and whose W_UV slice packs as a matrix of its own.
bool CopiesPay(const WeightMatrix& kv_b, const ModelConfig& c) {
  if (kv_b.data == nullptr || kv_b.packed) return false;
  if (kv_b.format == WeightFormat::kDense) return true;
  return kv_b.format == WeightFormat::kInt8Group && kv_b.block_cols % kPanelRows == 0 &&
         c.kv_lora_rank / kv_b.block_cols <= kMaxScaleGroups &&
         int64_t(c.qk_nope_head_dim) * (c.kv_lora_rank / kv_b.block_cols) <= kMaxAbsorbedQueryFloats &&
         c.kv_lora_rank % kv_b.block_cols == 0 && c.qk_nope_head_dim % 4 == 0 && kv_b.block_cols % 4 == 0;
}

}  // namespace

Status PackAbsorbedWeights(ModelWeights& w, const ModelConfig& c) {
  const int64_t rows_per_head = c.qk_nope_head_dim + c.v_head_dim;
  size_t total = 0;
  ForEachAttention(w, [&](AttentionWeights& a) {
    if (!CopiesPay(a.kv_b, c)) return;
    for (int64_t h = 0; h < a.kv_b.rows / rows_per_head; ++h) {
      total += AlignUp64(PackedBytes(TransposedShape(UkRows(a, c, h)))) + AlignUp64(PackedBytes(UvRows(a, c, h))) +
               AlignUp64(PackedBytes(UkRows(a, c, h)));
    }
  });
  if (total == 0) return Status::Ok();
  if (!w.absorbed_storage.Assign(total)) {
    return Status::Error("out of memory packing kv_b_proj's per-head copies (" + std::to_string(total) + " bytes)");
  }
  std::byte* at = w.absorbed_storage.data();
  // One thread: a few MB for a small model, 1.5 times kv_b's bytes for DeepSeek-V3 (1.6 GB at
  // Q8_0, 3.1 GB at bf16; memory-bound copies).
  ThreadPool one(1);
  ForEachAttention(w, [&](AttentionWeights& a) {
    if (!CopiesPay(a.kv_b, c)) return;
    const int64_t heads = a.kv_b.rows / rows_per_head;
    a.uk_t.resize(size_t(heads));
    a.uv.resize(size_t(heads));
    a.uk.resize(size_t(heads));
    // A layer's W_UK^T copies, then its W_UV ones, then its W_UK ones, each head after the
    // previous: a thread's run of heads is one stream (the kernels' prefetch runs on into the next
    // head).
    for (int64_t h = 0; h < heads; ++h) {
      const WeightMatrix uk = UkRows(a, c, h);
      a.uk_t[size_t(h)] = PackTransposedPanels(uk, at);
      at += AlignUp64(PackedBytes(TransposedShape(uk)));
    }
    for (int64_t h = 0; h < heads; ++h) {
      const WeightMatrix uv = UvRows(a, c, h);
      a.uv[size_t(h)] = PackPanels(uv, at, one);
      at += AlignUp64(PackedBytes(uv));
    }
    for (int64_t h = 0; h < heads; ++h) {
      const WeightMatrix uk = UkRows(a, c, h);
      a.uk[size_t(h)] = PackPanels(uk, at, one);
      at += AlignUp64(PackedBytes(uk));
    }
  });
  return Status::Ok();
}

void ScaleAbsorbedQuery(const AttentionWeights& a, const ModelConfig& c, int64_t head, const float* q_nope,
                        float* x) {
  const WeightMatrix uk = UkRows(a, c, head);
  const int64_t groups = uk.scale_cols(), nope = uk.rows;
  const auto* scales = static_cast<const std::byte*>(uk.scales);  // F32 [rows][groups], maybe unaligned
  float row[kMaxScaleGroups];
  MLA_CHECK(groups <= kMaxScaleGroups);
  for (int64_t d = 0; d < nope; ++d) {
    std::memcpy(row, scales + size_t((uk.scale_row0 + d) * groups) * sizeof(float), size_t(groups) * sizeof(float));
    for (int64_t g = 0; g < groups; ++g) x[g * nope + d] = q_nope[d] * row[g];
  }
}

}  // namespace mlaserve
