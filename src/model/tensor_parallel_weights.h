// A tensor-parallel rank's share of the weights (the rules: model/tensor_parallel.h), cut from
// the bound row-major views before they are packed, so a rank packs, and so reads from the
// checkpoint's mapping, only its own rows and experts.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace mlaserve {

struct TpShard {
  int rank = 0;
  int size = 1;
};

// The rank's views: heads' rows of q_b/q_proj and kv_b, output rows of o_proj, the MLPs and
// lm_head, its routed experts (the others' become empty matrices). Errors (one line): fewer
// heads, experts or row units than ranks, an fp8 shard that would start inside a scale block.
Result<ModelWeights> ShardWeights(ModelWeights weights, const ModelConfig& config, const TpShard& shard);

// The row unit a row-sharded matrix is split in (kShardRowUnit, or its fp8 block rows).
int64_t ShardRowUnit(const WeightMatrix& m);

// Every rank's ShardRange(total, unit).count() * scale, in rank order (the blocks of an
// all-gather of a row-sharded product's outputs, scale values per row).
std::vector<int64_t> ShardCounts(int64_t total, int64_t unit, int size, int64_t scale);

// The checkpoint bytes of what `weights` holds (matrices with their scales, norms as bf16, the
// router bias as f32): a rank's share after ShardWeights, for the KV budget and the start-up log.
size_t HeldWeightBytes(const ModelWeights& weights, const ModelConfig& config);

}  // namespace mlaserve
