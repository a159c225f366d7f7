#include "model/tp_comm.h"

namespace mlaserve {

int LatencyRoundsPerCollective(int tp_size) {
  int rounds = 0;
  while ((1 << rounds) < tp_size) ++rounds;
  return rounds;
}

TpCommPerToken ModelTpComm(const ModelConfig& c, int tp_size, TpScheme scheme) {
  TpCommPerToken out;
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) ++(c.IsMoeLayer(layer) ? out.moe_layers : out.dense_layers);
  if (tp_size <= 1) return out;
  constexpr double kFloatBytes = 4;
  const double peers_share = double(tp_size - 1) / double(tp_size);  // of a gathered vector
  const double all_gather = peers_share * kFloatBytes;                // bytes received per value
  const double all_reduce = 2 * peers_share * kFloatBytes;
  const double hidden = c.hidden_size;
  const double shared_inter = double(c.n_shared_experts) * double(c.moe_intermediate_size);
  const int shared_messages = c.n_shared_experts > 0 ? 2 : 0;
  out.lm_head_bytes = all_gather * double(c.vocab_size);
  out.lm_head_messages = 1;
  switch (scheme) {
    case TpScheme::kExactAllGather:
      out.attention_bytes = all_gather * (double(c.num_attention_heads) * double(c.v_head_dim) + hidden);
      out.attention_messages = 2;
      out.dense_mlp_bytes = all_gather * (double(c.intermediate_size) + hidden);
      out.dense_mlp_messages = 2;
      out.moe_bytes = all_gather * ((shared_messages > 0 ? shared_inter + hidden : 0) +
                                    double(c.num_experts_per_tok) * hidden);
      out.moe_messages = shared_messages + 1;
      break;
    case TpScheme::kAllReduce:
      out.attention_bytes = all_reduce * hidden;
      out.attention_messages = 1;
      out.dense_mlp_bytes = all_reduce * hidden;
      out.dense_mlp_messages = 1;
      out.moe_bytes = all_reduce * hidden;
      out.moe_messages = 1;
      break;
  }
  return out;
}

}  // namespace mlaserve
