#include "model/absorbed_weights.h"

#include <algorithm>
#include <cassert>
#include <vector>

#include "core/check.h"
#include "kernels/pack.h"
#include "kernels/weight_value.h"

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

// Whether a head's rows pack as a matrix of their own: in every grouped format (group scales
// are per row) and dense; fp8 blocks only where PanelCopiesPay says.
bool RowsPackAlone(const WeightMatrix& kv_b) {
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

// W_UV and W_UK copies: where a head's rows pack alone, and for fp8 blocks where each head's W_UK
// and W_UV rows are whole bands of the block grid (DeepSeek-V3's 128 x 128 blocks with nope = v =
// 128: a band per copy), so that each copy keeps its bands' scales.
bool PanelCopiesPay(const WeightMatrix& kv_b, const ModelConfig& c) {
  if (kv_b.format != WeightFormat::kFp8Block) return RowsPackAlone(kv_b);
  // (A band's first row: CanPackTransposed, which W_UK^T's copy needs too.)
  return kv_b.data != nullptr && !kv_b.packed && CanPackTransposed(kv_b) && c.qk_nope_head_dim % kv_b.block_rows == 0 &&
         c.v_head_dim % kv_b.block_rows == 0;
}

// The W_UK^T copy: dense, or int8 groups whose groups hold whole panels of W_UK^T rows (the query
// is scaled per group) within the query scaling's scratch.
bool TransposedCopyPays(const WeightMatrix& kv_b, const ModelConfig& c) {
  if (!PanelCopiesPay(kv_b, c)) return false;
  if (kv_b.format == WeightFormat::kDense) return true;
  // fp8: the blocks transposed, each head's W_UK whole bands (PanelCopiesPay), so the query is
  // multiplied as it is, one product a head (the copy's block columns, kv_b's block rows, even).
  if (kv_b.format == WeightFormat::kFp8Block) return kv_b.block_rows % 2 == 0;
  const bool codes = kv_b.format == WeightFormat::kInt8Group || kv_b.format == WeightFormat::kUint8GroupMin ||
                     (kv_b.format == WeightFormat::kUint4GroupMin && c.qk_nope_head_dim % 8 == 0);
  return codes && kv_b.block_cols % kPanelRows == 0 && c.kv_lora_rank % kv_b.block_cols == 0 &&
         c.kv_lora_rank / kv_b.block_cols <= kMaxAbsorbedQueryGroups &&
         int64_t(c.qk_nope_head_dim) * (c.kv_lora_rank / kv_b.block_cols) <= kMaxAbsorbedQueryFloats &&
         c.qk_nope_head_dim % 4 == 0;
}

// A split pair's copies (AttentionWeights::k_b, v_b), which pack as they are; PackAbsorbedWeights
// refuses a pair whose format would not.
bool SplitPairPacks(const AttentionWeights& a) { return RowsPackAlone(a.k_b) && RowsPackAlone(a.v_b); }

// Floats of a grouped W_UK's scale table: [groups][nope] scales, then with mins [nope][groups].
int64_t ScaleTableFloats(const WeightMatrix& uk) {
  if (!uk.quantized() || uk.format == WeightFormat::kFp8Block) return 0;  // fp8: the copy keeps its scales
  return uk.scale_cols() * uk.rows * (uk.has_mins() ? 2 : 1);
}

// The table from W_UK's scales (and mins): the scales transposed, so that the query's copy for
// group g multiplies one contiguous row, and the mins as kv_b holds them, which the query's min
// sums read row by row.
void FillScaleTable(const WeightMatrix& uk, float* table) {
  const int64_t groups = uk.scale_cols(), nope = uk.rows;
  for (int64_t d = 0; d < nope; ++d) {
    for (int64_t g = 0; g < groups; ++g) {
      table[g * nope + d] = WeightScaleAt(uk, d, g * uk.block_cols);
      if (uk.has_mins()) table[groups * nope + d * groups + g] = WeightMinAt(uk, d, g * uk.block_cols);
    }
  }
}

// out[i] = a[i] * b[i], i < n (a multiple of 4): four at a time, so that -O2 vectorizes it (the
// plain loop ran scalar, its stores 77% of ScaleAbsorbedQuery's samples in `perf annotate`).
void MultiplyFours(const float* __restrict a, const float* __restrict b, int64_t n, float* __restrict out) {
  assert(n % 4 == 0);
  for (int64_t i = 0; i < n; i += 4) {
    out[i] = a[i] * b[i];
    out[i + 1] = a[i + 1] * b[i + 1];
    out[i + 2] = a[i + 2] * b[i + 2];
    out[i + 3] = a[i + 3] * b[i + 3];
  }
}

}  // namespace

Status PackAbsorbedWeights(ModelWeights& w, const ModelConfig& c, ThreadPool& pool) {
  const int64_t rows_per_head = c.qk_nope_head_dim + c.v_head_dim, L = c.kv_lora_rank;
  // How a copy is made from its source rows: packed as they are, transposed (kv_b's W_UK^T, with
  // its scale table where grouped), or transposed and widened to F32 by WeightAt (a split pair's
  // W_UK for the MHA form: k_b's groups run along nope, which W_UK's products sum across).
  enum class Copy { kRows, kTransposed, kTransposedF32 };
  // The copies of one layer, in storage order: its W_UK^T ones (where they pay), then W_UV, then
  // W_UK, each head after the previous: a thread's run of heads is one stream (the kernels'
  // prefetch runs on into the next head). visit(copy list, head, its source rows, how).
  auto for_each_copy = [&](AttentionWeights& a, auto&& visit) {
    if (HasSplitKvB(a)) {  // W_UK^T and W_UV as stored
      const int64_t heads = a.k_b.rows / L;
      for (int64_t h = 0; h < heads; ++h) visit(a.uk_t, h, a.k_b.Slice(h * L, L), Copy::kRows);
      for (int64_t h = 0; h < heads; ++h) visit(a.uv, h, a.v_b.Slice(h * c.v_head_dim, c.v_head_dim), Copy::kRows);
      for (int64_t h = 0; h < heads; ++h) visit(a.uk, h, a.k_b.Slice(h * L, L), Copy::kTransposedF32);
      return;
    }
    if (!PanelCopiesPay(a.kv_b, c)) return;
    const int64_t heads = a.kv_b.rows / rows_per_head;
    for (int64_t h = 0; TransposedCopyPays(a.kv_b, c) && h < heads; ++h) {
      visit(a.uk_t, h, UkRows(a, c, h), Copy::kTransposed);
    }
    for (int64_t h = 0; h < heads; ++h) visit(a.uv, h, UvRows(a, c, h), Copy::kRows);
    for (int64_t h = 0; h < heads; ++h) visit(a.uk, h, UkRows(a, c, h), Copy::kRows);
  };
  // A grouped W_UK^T copy follows its head's scale table (ScaleTableFloats).
  auto bytes = [](const WeightMatrix& rows, Copy how) {
    switch (how) {
      case Copy::kRows: return PackedBytes(rows);  // a multiple of 64: each copy 64-byte aligned
      case Copy::kTransposed:
        return PackedBytes(TransposedShape(rows)) + PackAlignUp(size_t(ScaleTableFloats(rows)) * sizeof(float));
      case Copy::kTransposedF32: return PackedF32PanelsBytes(rows.cols, rows.rows, DType::kF32);
    }
    return size_t(0);
  };
  bool split_packs = true;
  ForEachAttention(w, [&](AttentionWeights& a) {
    if (HasSplitKvB(a)) split_packs = split_packs && SplitPairPacks(a);
  });
  if (!split_packs) {
    return Status::Error("the split attn_k_b / attn_v_b pair's format cannot be packed for the absorbed products "
                         "(a column count or group not a multiple of the panels' 4 or 8)");
  }
  size_t total = 0;
  ForEachAttention(w, [&](AttentionWeights& a) {
    for_each_copy(a, [&](std::vector<WeightMatrix>&, int64_t, const WeightMatrix& rows, Copy how) {
      total += bytes(rows, how);
    });
  });
  if (total == 0) return Status::Ok();
  if (!w.absorbed_storage.Assign(total)) {
    return Status::Error("out of memory packing kv_b_proj's per-head copies (" + std::to_string(total) + " bytes)");
  }
  std::byte* at = w.absorbed_storage.data();
  std::vector<float> widened;  // [nope * kv_lora] a split pair's W_UK^T, widened (kTransposedF32)
  ForEachAttention(w, [&](AttentionWeights& a) {
    for_each_copy(a, [&](std::vector<WeightMatrix>& copies, int64_t h, const WeightMatrix& rows, Copy how) {
      if (copies.size() <= size_t(h)) copies.resize(size_t(h) + 1);
      switch (how) {
        case Copy::kRows: copies[size_t(h)] = PackPanels(rows, at, pool); break;
        case Copy::kTransposed: {
          // A grouped copy's table first: the query's product reads it, then the codes (the
          // one-pass kernel fetches the next head's table itself: the copy's unit scale lines
          // lie between).
          const size_t table_bytes = PackAlignUp(size_t(ScaleTableFloats(rows)) * sizeof(float));
          if (table_bytes > 0) {
            if (a.uk_t_scales.size() <= size_t(h)) a.uk_t_scales.resize(size_t(h) + 1);
            auto* table = reinterpret_cast<float*>(at);
            FillScaleTable(rows, table);
            a.uk_t_scales[size_t(h)] = table;
          }
          copies[size_t(h)] = PackTransposedPanels(rows, at + table_bytes);
          break;
        }
        case Copy::kTransposedF32:
          // rows: W_UK^T [kv_lora, nope]; the copy W_UK [nope, kv_lora]: (j, c) = rows(c, j).
          // (Over the pool, rows apart: a value at a time through WeightAt, and DeepSeek-V3
          // widens 61 x 128 heads of 512 x 128 values, 512M in all.)
          widened.resize(size_t(rows.rows * rows.cols));
          pool.ParallelFor(rows.rows, 16, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
              for (int64_t j = 0; j < rows.cols; ++j) widened[size_t(r * rows.cols + j)] = WeightAt(rows, r, j);
            }
          });
          copies[size_t(h)] = PackF32Panels(widened.data(), rows.cols, rows.rows, 1, rows.cols, DType::kF32, at);
          break;
      }
      at += bytes(rows, how);
    });
  });
  return Status::Ok();
}

void ScaleAbsorbedQuery(const KernelSet& k, const AttentionWeights& a, const ModelConfig& c, int64_t head,
                        const float* q_nope, float* x, float* min_sums) {
  const WeightMatrix uk = UkRows(a, c, head);
  const int64_t groups = uk.scale_cols(), nope = uk.rows;
  MLA_CHECK(groups <= kMaxAbsorbedQueryGroups && size_t(head) < a.uk_t_scales.size());
  const float* scales = a.uk_t_scales[size_t(head)];  // [groups][nope]; nope % 4 == 0 (TransposedCopyPays)
  for (int64_t g = 0; g < groups; ++g) MultiplyFours(q_nope, scales + g * nope, nope, x + g * nope);
  if (!uk.has_mins()) return;
  const float* mins = scales + groups * nope;  // [nope][groups]
  std::fill(min_sums, min_sums + groups, 0.0f);
  for (int64_t d = 0; d < nope; ++d) k.axpy_f32(q_nope[d], mins + d * groups, min_sums, groups);
}

namespace {

// MultiplyAbsorbedQuery's plain path for a grouped copy (its own frame: the scaled copies' 32 KB
// of stack only where they are used).
[[gnu::noinline]] void MultiplyGroupsPlain(const KernelSet& k, const AttentionWeights& a, const ModelConfig& c,
                                           int64_t head, const float* q_nope, float* q_lat) {
  const WeightMatrix uk = UkRows(a, c, head);
  const WeightMatrix& uk_t = a.uk_t[size_t(head)];
  const int64_t group_rows = uk.block_cols, groups = uk.scale_cols(), nope = uk.rows;
  float scaled[kMaxAbsorbedQueryFloats];    // [groups, nope]
  float min_sums[kMaxAbsorbedQueryGroups];  // [groups] (codes with mins)
  ScaleAbsorbedQuery(k, a, c, head, q_nope, scaled, min_sums);
  for (int64_t g = 0; g < groups; ++g) {
    k.matmul_panels(scaled + g * nope, 1, uk_t, g * group_rows / kPanelRows, (g + 1) * group_rows / kPanelRows, q_lat,
                    c.kv_lora_rank);
    if (uk.has_mins()) {
      for (int64_t r = g * group_rows; r < (g + 1) * group_rows; ++r) q_lat[r] -= min_sums[g];
    }
  }
}

}  // namespace

void MultiplyAbsorbedQuery(const KernelSet& k, const AttentionWeights& a, const ModelConfig& c, int64_t head,
                           const float* q_nope, float* q_lat) {
  const WeightMatrix& uk_t = a.uk_t[size_t(head)];
  if (a.uk_t_scales.empty()) {
    k.matmul_panels(q_nope, 1, uk_t, 0, uk_t.num_panels(), q_lat, c.kv_lora_rank);
    return;
  }
  const WeightMatrix uk = UkRows(a, c, head);
  const int64_t groups = uk.scale_cols(), nope = uk.rows;
  // (TransposedCopyPays' limits: groups <= kMaxAbsorbedQueryGroups, groups * nope floats.)
  MLA_CHECK(nope * groups <= kMaxAbsorbedQueryFloats && groups <= kMaxAbsorbedQueryGroups &&
            size_t(head) < a.uk_t_scales.size());
  if (k.grouped_query_product != nullptr && GroupedQueryProductTakes(uk_t)) {
    const float* table = a.uk_t_scales[size_t(head)];
    const float* next = size_t(head) + 1 < a.uk_t_scales.size() ? a.uk_t_scales[size_t(head) + 1] : nullptr;
    k.grouped_query_product(q_nope, table, uk.has_mins() ? table + groups * nope : nullptr, uk_t, uk.block_cols, next,
                            q_lat);
    return;
  }
  MultiplyGroupsPlain(k, a, c, head, q_nope, q_lat);
}

}  // namespace mlaserve
