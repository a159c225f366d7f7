// What one tensor-parallel rank receives over the network per token (for `plan`; the formulas
// are in docs/distributed.md, "Communication model"). All values travel as fp32.
//
// kExactAllGather (what mlaserve runs, model/tensor_parallel.h): no reduction dimension is
// split; ranks exchange finished values. Per layer: attention gathers its output (heads x
// v_head_dim per token) and o_proj's (hidden); a dense MLP gathers the intermediate and down's
// output (hidden); a MoE layer gathers the shared experts' intermediate (n_shared x
// moe_intermediate) and down's output (hidden), then the routed experts' outputs (top-k x hidden:
// each computed on the rank owning that expert). lm_head's logits (vocab) gather to rank 0.
// kAllReduce (the alternative: split reduction dimensions, sum partial sums; not bit-exact):
// one all-reduce of hidden per attention and one per MLP or MoE layer (routed + shared summed
// together); lm_head as above.
//
// Ring collectives over N ranks: an all-gather of V values brings each rank (N - 1) / N x V;
// an all-reduce of V sends and receives 2 (N - 1) / N x V per rank; the gather to rank 0 brings
// rank 0 (N - 1) / N x V (the other ranks receive nothing).
// Latency: a collective of small messages (a decode step's are tens of KB) takes ceil(log2 N)
// rounds, each at least one network latency (recursive doubling or Bruck all-gather, recursive
// doubling all-reduce, binomial-tree gather: what MPI libraries pick for small messages).
#pragma once

#include "model/config.h"

namespace mlaserve {

enum class TpScheme { kExactAllGather, kAllReduce };

struct TpCommPerToken {
  // Bytes a rank receives per token, per layer of each kind.
  double attention_bytes = 0;
  double dense_mlp_bytes = 0;
  double moe_bytes = 0;       // shared experts + routed experts
  double lm_head_bytes = 0;   // rank 0, per logits row
  // Collective calls per layer of each kind (per forward step: a step's tokens share them).
  int attention_messages = 0;
  int dense_mlp_messages = 0;
  int moe_messages = 0;
  int lm_head_messages = 0;
  int dense_layers = 0;
  int moe_layers = 0;

  // Rank 0, per decode token (one logits row each) and per prefill token that is not its
  // sequence's last (no logits row).
  double decode_bytes() const { return prefill_bytes() + lm_head_bytes; }
  double prefill_bytes() const {
    const int layers = dense_layers + moe_layers;
    return layers * attention_bytes + dense_layers * dense_mlp_bytes + moe_layers * moe_bytes;
  }
  int messages_per_step() const {
    const int layers = dense_layers + moe_layers;
    return layers * attention_messages + dense_layers * dense_mlp_messages + moe_layers * moe_messages +
           lm_head_messages;
  }
};

// Latency rounds of one collective over tp_size ranks: ceil(log2 tp_size).
int LatencyRoundsPerCollective(int tp_size);

// tp_size 1: nothing is exchanged (every figure 0).
TpCommPerToken ModelTpComm(const ModelConfig& config, int tp_size, TpScheme scheme);

}  // namespace mlaserve
