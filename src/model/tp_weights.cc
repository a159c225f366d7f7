#include "model/tp_weights.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace mlaserve {
namespace {

enum class Split { kReplicated, kHeads, kRows, kRoutedExpert };

struct Role {
  Split split = Split::kReplicated;
  int64_t rows_per_head = 0;  // kHeads
  int64_t expert = -1;        // kRoutedExpert
};

bool IsMlpMatrix(const std::string& name) {
  return name.ends_with("gate_proj.weight") || name.ends_with("up_proj.weight") || name.ends_with("down_proj.weight");
}

// `name`: a tensor BindWeights reads, without the config's tensor_prefix.
Role RoleOf(const std::string& name, const ModelConfig& c) {
  if (name.ends_with("q_b_proj.weight") || name.ends_with("self_attn.q_proj.weight")) {
    return {.split = Split::kHeads, .rows_per_head = c.qk_head_dim()};
  }
  // (A GGUF's split pair reaches the plan as one kv_b_proj of the combined shape: GgufWeightSource
  // merges it. Its stored names, kv_b_proj.weight_k_b / _v_b, would map here by SpecNameOf but have
  // heads * kv_lora and heads * v rows, not heads * (nope + v).)
  if (name.ends_with("kv_b_proj.weight")) {
    return {.split = Split::kHeads, .rows_per_head = int64_t(c.qk_nope_head_dim) + c.v_head_dim};
  }
  if (const size_t at = name.find(".mlp.experts."); at != std::string::npos) {
    return {.split = Split::kRoutedExpert, .expert = std::stoll(name.substr(at + 13))};
  }
  if (name.ends_with("o_proj.weight") || name == "lm_head.weight" || IsMlpMatrix(name)) return {.split = Split::kRows};
  return {};
}

// The spec a stored tensor belongs to: its own name, or the matrix's "X.weight" for the
// companions "X.weight_scale_inv", "X.weight_packed", "X.weight_scale", "X.weight_shape".
std::string SpecNameOf(const std::string& stored_name) {
  const size_t at = stored_name.rfind(".weight_");
  return at == std::string::npos ? stored_name : stored_name.substr(0, at + 7);
}

// Bytes of `t` (a stored tensor of a matrix with `rows` logical rows) that hold logical rows
// [begin, end): whole row blocks, every block the range touches.
double RowShareBytes(const StoredTensor& t, int64_t rows, int64_t begin, int64_t end, int64_t scale_block_rows) {
  if (end <= begin) return 0;
  const int64_t stored_rows = t.shape[0];
  const int64_t block = stored_rows == rows ? 1 : scale_block_rows;
  const int64_t first = begin / block, last = std::min(stored_rows, (end + block - 1) / block);
  return t.bytes * double(last - first) / double(stored_rows);
}

}  // namespace

TpWeightPlan PlanTpWeights(const ModelConfig& c, std::span<const StoredTensor> stored, int tp_size) {
  TpWeightPlan plan;
  plan.tp_size = tp_size;
  plan.ranks.resize(size_t(tp_size));
  const std::vector<TensorSpec> specs = ListWeightTensors(c);
  std::unordered_map<std::string, size_t> spec_index;
  for (size_t i = 0; i < specs.size(); ++i) spec_index.emplace(specs[i].name, i);
  std::vector<std::vector<const StoredTensor*>> parts(specs.size());
  for (const StoredTensor& t : stored) {
    auto it = spec_index.find(SpecNameOf(t.name));
    if (it == spec_index.end()) {
      plan.not_loaded_bytes += t.bytes;
      continue;
    }
    parts[it->second].push_back(&t);
    plan.loaded_bytes += t.bytes;
  }
  for (int r = 0; r < tp_size; ++r) {
    plan.ranks[size_t(r)].experts_per_layer = ShardRange(c.n_routed_experts, 1, r, tp_size).count();
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string name = specs[i].name.substr(c.tensor_prefix.size());
    const Role role = RoleOf(name, c);
    const int64_t rows = specs[i].shape[0];
    bool fp8 = false;
    for (const StoredTensor* t : parts[i]) fp8 = fp8 || t->name.ends_with("_scale_inv");
    const int64_t row_unit = ShardRowUnit(fp8, c.quant.block_rows);  // the runtime's (tensor_parallel.h)
    for (const StoredTensor* t : parts[i]) {
      if (name == "model.embed_tokens.weight") plan.embedding_bytes += t->bytes;
      if (role.split == Split::kReplicated || t->shape.size() != 2) {
        plan.replicated_bytes += t->bytes;
        continue;
      }
      if (role.split == Split::kRoutedExpert) plan.routed_expert_bytes += t->bytes;
      for (int r = 0; r < tp_size; ++r) {
        TpRankWeights& rank = plan.ranks[size_t(r)];
        switch (role.split) {
          case Split::kHeads: {
            const ShardRangeResult heads = ShardRange(c.num_attention_heads, 1, r, tp_size);
            rank.sharded_bytes += RowShareBytes(*t, rows, heads.begin * role.rows_per_head,
                                                heads.end * role.rows_per_head, c.quant.block_rows);
            break;
          }
          case Split::kRows: {
            const ShardRangeResult range = ShardRange(rows, row_unit, r, tp_size);  // the last rank takes the tail
            rank.sharded_bytes += RowShareBytes(*t, rows, range.begin, range.end, c.quant.block_rows);
            break;
          }
          case Split::kRoutedExpert: {
            const ShardRangeResult experts = ShardRange(c.n_routed_experts, 1, r, tp_size);
            if (role.expert >= experts.begin && role.expert < experts.end) rank.expert_bytes += t->bytes;
            break;
          }
          case Split::kReplicated: break;
        }
      }
    }
  }
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    TpRankWeights& rank = plan.ranks[r];
    rank.bytes = plan.replicated_bytes + rank.sharded_bytes + rank.expert_bytes;
    if (rank.bytes > plan.ranks[size_t(plan.largest_rank)].bytes) plan.largest_rank = int64_t(r);
  }
  return plan;
}

double DecodeReadBytesPerToken(const TpWeightPlan& plan, const ModelConfig& c, int rank) {
  const TpRankWeights& w = plan.ranks[size_t(rank)];
  double replicated = plan.replicated_bytes;
  if (!c.tie_word_embeddings && c.vocab_size > 0) {
    replicated -= plan.embedding_bytes - plan.embedding_bytes / double(c.vocab_size);
  }
  const double experts =
      c.n_routed_experts > 0 ? w.expert_bytes * double(c.num_experts_per_tok) / double(c.n_routed_experts) : 0;
  return replicated + w.sharded_bytes + experts;
}

}  // namespace mlaserve
