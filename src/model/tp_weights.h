// What each tensor-parallel rank holds of the weights, in bytes, under the split of
// model/tensor_parallel.h, and what one rank reads from memory for a decode token (for `plan`).
// Works on stored tensors (model/weight_bytes.h): a checkpoint's own, or the config's estimate,
// so quantized matrices split with their scales.
//
// A stored tensor of a sharded matrix splits by its rows: the rank's logical rows [b, e) hold
// weight rows [b, e) and, for an fp8 scale_inv, the scale rows of every block they touch (a head
// range of q_b_proj can start inside a 128-row block: both ranks then hold that scale row, so
// the ranks' sum can exceed total + (N - 1) x replicated by those rows). 1-D companions of a
// sharded matrix (int4 weight_shape) are held whole by every rank and count as replicated.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/weight_bytes.h"

namespace mlaserve {

struct TpRankWeights {
  double bytes = 0;             // everything the rank holds = replicated + sharded + experts
  double sharded_bytes = 0;     // its heads' and rows' share of the split matrices
  double expert_bytes = 0;      // its routed experts, whole, over every MoE layer
  int64_t experts_per_layer = 0;  // routed experts it owns in each MoE layer
};

struct TpWeightPlan {
  int tp_size = 1;
  std::vector<TpRankWeights> ranks;  // [tp_size]
  double loaded_bytes = 0;      // every tensor mlaserve loads, once (= ranks[0].bytes at tp 1)
  double replicated_bytes = 0;  // held whole by every rank
  double not_loaded_bytes = 0;  // stored tensors mlaserve does not load (MTP layers, a vision tower)
  double embedding_bytes = 0;   // of replicated: embed_tokens (a token reads one row of it)
  double routed_expert_bytes = 0;  // every routed expert of every MoE layer
  int64_t largest_rank = 0;     // the rank holding the most bytes (the KV budget's bound)
};

// `stored`: the checkpoint's tensors or EstimateStoredTensors(config).
TpWeightPlan PlanTpWeights(const ModelConfig& config, std::span<const StoredTensor> stored, int tp_size);

// Bytes rank `rank` reads from memory per decode token at batch 1: everything it holds except
// the embedding (one row of it; all of it when it is also lm_head), and of its routed experts
// the share a token picks on average: k top-k experts of n_routed spread evenly, so a rank
// owning m experts per layer reads k x m / n_routed of them per layer. KV cache reads excluded.
double DecodeReadBytesPerToken(const TpWeightPlan& plan, const ModelConfig& config, int rank);

}  // namespace mlaserve
