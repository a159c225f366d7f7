// ShardWeights: a rank's views of the bound (row-major, still mapped) weights, before packing.
#include "model/tensor_parallel_weights.h"

#include <algorithm>
#include <string>

namespace mlaserve {
namespace {

// Rows [begin, begin + count) of a matrix that will be packed: fp8's scale grid then starts at
// the slice's first block (packing copies whole grids), so the slice must start a block.
Result<WeightMatrix> PackableRows(const WeightMatrix& m, int64_t begin, int64_t count, const std::string& what) {
  if (m.format != WeightFormat::kFp8Block) return m.Slice(begin, count);
  if (begin % m.block_rows != 0) {
    return Status::Error(what + ": this rank's rows start at row " + std::to_string(begin) +
                         ", inside an fp8 scale block of " + std::to_string(m.block_rows) +
                         " rows; choose a --tp-size whose shards start whole blocks");
  }
  WeightMatrix s = m;
  s.rows = count;
  s.data = m.row(begin);
  s.scales = static_cast<const std::byte*>(m.scales) + size_t(begin / m.block_rows) * size_t(m.scale_cols()) * 4;
  s.scale_row0 = 0;
  return s;
}

// Output rows split in units of RowUnit: the rank's rows.
Result<WeightMatrix> ByRows(const WeightMatrix& m, const TpShard& shard, const std::string& what) {
  const int64_t unit = ShardRowUnit(m);
  if (m.rows < unit * shard.size) {
    return Status::Error(what + ": " + std::to_string(m.rows) + " rows are fewer than " + std::to_string(shard.size) +
                         " ranks x " + std::to_string(unit) + " rows");
  }
  const ShardRangeResult r = ShardRange(m.rows, unit, shard.rank, shard.size);
  return PackableRows(m, r.begin, r.count(), what);
}

}  // namespace

std::vector<int64_t> ShardCounts(int64_t total, int64_t unit, int size, int64_t scale) {
  std::vector<int64_t> counts(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) counts[size_t(r)] = ShardRange(total, unit, r, size).count() * scale;
  return counts;
}

int64_t ShardRowUnit(const WeightMatrix& m) {
  return ShardRowUnit(m.format == WeightFormat::kFp8Block, m.block_rows);
}

Result<ModelWeights> ShardWeights(ModelWeights w, const ModelConfig& c, const TpShard& shard) {
  if (shard.size <= 1) return w;
  const std::string ranks = " over " + std::to_string(shard.size) + " tensor-parallel ranks";
  if (c.num_attention_heads < shard.size) {
    return Status::Error(std::to_string(c.num_attention_heads) + " attention heads cannot be split" + ranks);
  }
  if (c.n_routed_experts > 0 && c.n_routed_experts < shard.size) {
    return Status::Error(std::to_string(c.n_routed_experts) + " routed experts cannot be split" + ranks);
  }
  const ShardRangeResult heads = ShardRange(c.num_attention_heads, 1, shard.rank, shard.size);
  const ShardRangeResult experts = ShardRange(c.n_routed_experts, 1, shard.rank, shard.size);
  Status status;
  auto take = [&](WeightMatrix& m, Result<WeightMatrix> r) {
    if (!status.ok()) return;
    if (!r.ok()) {
      status = r.status();
      return;
    }
    m = *r;
  };
  auto mlp = [&](MlpWeights& m, const std::string& name) {
    take(m.gate, ByRows(m.gate, shard, name + ".gate_proj"));
    take(m.up, ByRows(m.up, shard, name + ".up_proj"));
    take(m.down, ByRows(m.down, shard, name + ".down_proj"));
  };
  // (A tied lm_head is a view of the replicated embedding: its slice is packed like any other.)
  take(w.lm_head, ByRows(w.lm_head, shard, "lm_head"));
  for (size_t l = 0; l < w.layers.size(); ++l) {
    LayerWeights& layer = w.layers[l];
    const std::string p = "layer " + std::to_string(l) + " ";
    AttentionWeights& a = layer.attn;
    const int64_t q_rows = c.qk_head_dim(), kv_rows = c.qk_nope_head_dim + c.v_head_dim;
    WeightMatrix& q = c.q_lora_rank > 0 ? a.q_b : a.q_proj;
    take(q, PackableRows(q, heads.begin * q_rows, heads.count() * q_rows, p + (c.q_lora_rank > 0 ? "q_b_proj" : "q_proj")));
    if (HasSplitKvB(a)) {  // kv_b empty: each of the pair cut by heads
      a.k_b = a.k_b.Slice(heads.begin * c.kv_lora_rank, heads.count() * c.kv_lora_rank);
      a.v_b = a.v_b.Slice(heads.begin * c.v_head_dim, heads.count() * c.v_head_dim);
    } else {
      a.kv_b = a.kv_b.Slice(heads.begin * kv_rows, heads.count() * kv_rows);  // read by rows: any start
    }
    take(a.o_proj, ByRows(a.o_proj, shard, p + "o_proj"));
    if (layer.is_moe) {
      for (int e = 0; e < c.n_routed_experts; ++e) {
        if (e < experts.begin || e >= experts.end) layer.moe.experts[size_t(e)] = MlpWeights{};  // another rank's
      }
      if (layer.moe.has_shared) mlp(layer.moe.shared, p + "shared_experts");
    } else {
      mlp(layer.mlp, p + "mlp");
    }
  }
  if (!status.ok()) return status;
  return w;
}

size_t HeldWeightBytes(const ModelWeights& w, const ModelConfig& c) {
  size_t bytes = w.embed.stored_bytes() + w.final_norm.size() * 2;
  if (!c.tie_word_embeddings) bytes += w.lm_head.stored_bytes();
  auto mlp = [&](const MlpWeights& m) { bytes += m.gate.stored_bytes() + m.up.stored_bytes() + m.down.stored_bytes(); };
  for (const LayerWeights& layer : w.layers) {
    const AttentionWeights& a = layer.attn;
    for (const WeightMatrix* m : {&a.q_a, &a.q_b, &a.q_proj, &a.kv_a, &a.kv_b, &a.k_b, &a.v_b, &a.o_proj}) bytes += m->stored_bytes();
    bytes += (layer.input_norm.size() + layer.post_attn_norm.size() + a.q_a_norm.size() + a.kv_a_norm.size()) * 2;
    if (layer.is_moe) {
      bytes += layer.moe.router.stored_bytes() + layer.moe.correction_bias.size() * 4;
      for (const MlpWeights& e : layer.moe.experts) mlp(e);
      if (layer.moe.has_shared) mlp(layer.moe.shared);
    } else {
      mlp(layer.mlp);
    }
  }
  return bytes;
}

}  // namespace mlaserve
