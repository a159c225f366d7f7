#include "model/absorbed_weights.h"

#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/pack.h"

namespace mlaserve {
namespace {

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

// W_UV and W_UK copies: a head's rows pack as a matrix of their own in every grouped format
// (group scales are per row) and dense; fp8 blocks span heads' rows (no copies).
bool PanelCopiesPay(const WeightMatrix& kv_b) {
  if (kv_b.data == nullptr || kv_b.packed) return false;
  switch (kv_b.format) {
    case WeightFormat::kDense: return true;
    case WeightFormat::kInt4Group: return kv_b.cols % 2 == 0;
    case WeightFormat::kInt8Group:
    case WeightFormat::kUint8GroupMin: return kv_b.cols % 4 == 0 && kv_b.block_cols % 4 == 0;
    case WeightFormat::kUint4GroupMin: return kv_b.cols % 8 == 0 && kv_b.block_cols % 8 == 0;
    case WeightFormat::kFp8Block: return false;
  }
  return false;
}

// The W_UK^T copy: dense, or int8 groups whose groups hold whole panels of W_UK^T rows (the query
// is scaled per group) within the query scaling's scratch.
bool TransposedCopyPays(const WeightMatrix& kv_b, const ModelConfig& c) {
  if (!PanelCopiesPay(kv_b)) return false;
  if (kv_b.format == WeightFormat::kDense) return true;
  const bool codes = kv_b.format == WeightFormat::kInt8Group || kv_b.format == WeightFormat::kUint8GroupMin ||
                     (kv_b.format == WeightFormat::kUint4GroupMin && c.qk_nope_head_dim % 8 == 0);
  return codes && kv_b.block_cols % kPanelRows == 0 && c.kv_lora_rank % kv_b.block_cols == 0 &&
         c.kv_lora_rank / kv_b.block_cols <= kMaxAbsorbedQueryGroups &&
         int64_t(c.qk_nope_head_dim) * (c.kv_lora_rank / kv_b.block_cols) <= kMaxAbsorbedQueryFloats &&
         c.qk_nope_head_dim % 4 == 0;
}

}  // namespace

Status PackAbsorbedWeights(ModelWeights& w, const ModelConfig& c, ThreadPool& pool) {
  const int64_t rows_per_head = c.qk_nope_head_dim + c.v_head_dim;
  // The copies of one layer, in storage order: its W_UK^T ones (where they pay), then W_UV, then
  // W_UK, each head after the previous: a thread's run of heads is one stream (the kernels'
  // prefetch runs on into the next head). visit(copy list, head, its rows, transposed).
  auto for_each_copy = [&](AttentionWeights& a, auto&& visit) {
    if (!PanelCopiesPay(a.kv_b)) return;
    const int64_t heads = a.kv_b.rows / rows_per_head;
    for (int64_t h = 0; TransposedCopyPays(a.kv_b, c) && h < heads; ++h) visit(a.uk_t, h, UkRows(a, c, h), true);
    for (int64_t h = 0; h < heads; ++h) visit(a.uv, h, UvRows(a, c, h), false);
    for (int64_t h = 0; h < heads; ++h) visit(a.uk, h, UkRows(a, c, h), false);
  };
  auto bytes = [](const WeightMatrix& rows, bool transposed) {
    return PackedBytes(transposed ? TransposedShape(rows) : rows);  // a multiple of 64: each copy 64-byte aligned
  };
  size_t total = 0;
  ForEachAttention(w, [&](AttentionWeights& a) {
    for_each_copy(a, [&](std::vector<WeightMatrix>&, int64_t, const WeightMatrix& rows, bool transposed) {
      total += bytes(rows, transposed);
    });
  });
  if (total == 0) return Status::Ok();
  if (!w.absorbed_storage.Assign(total)) {
    return Status::Error("out of memory packing kv_b_proj's per-head copies (" + std::to_string(total) + " bytes)");
  }
  std::byte* at = w.absorbed_storage.data();
  ForEachAttention(w, [&](AttentionWeights& a) {
    for_each_copy(a, [&](std::vector<WeightMatrix>& copies, int64_t h, const WeightMatrix& rows, bool transposed) {
      if (copies.size() <= size_t(h)) copies.resize(size_t(h) + 1);
      copies[size_t(h)] = transposed ? PackTransposedPanels(rows, at) : PackPanels(rows, at, pool);
      at += bytes(rows, transposed);
    });
  });
  return Status::Ok();
}

void ScaleAbsorbedQuery(const AttentionWeights& a, const ModelConfig& c, int64_t head, const float* q_nope, float* x,
                        float* min_sums) {
  const WeightMatrix uk = UkRows(a, c, head);
  const int64_t groups = uk.scale_cols(), nope = uk.rows;
  const int64_t per_group = uk.has_mins() ? 2 : 1;  // F32 scale, or (scale, min) pairs
  const auto* scales = static_cast<const std::byte*>(uk.scales);  // F32 [rows][groups][per_group], maybe unaligned
  float row[2 * kMaxAbsorbedQueryGroups];
  MLA_CHECK(groups <= kMaxAbsorbedQueryGroups);
  if (uk.has_mins()) std::fill(min_sums, min_sums + groups, 0.0f);
  for (int64_t d = 0; d < nope; ++d) {
    std::memcpy(row, scales + size_t((uk.scale_row0 + d) * groups * per_group) * sizeof(float),
                size_t(groups * per_group) * sizeof(float));
    for (int64_t g = 0; g < groups; ++g) {
      x[g * nope + d] = q_nope[d] * row[g * per_group];
      if (uk.has_mins()) min_sums[g] += q_nope[d] * row[g * per_group + 1];
    }
  }
}

}  // namespace mlaserve
