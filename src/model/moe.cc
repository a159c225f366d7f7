// Mixture of experts: route each token to top-k routed experts (softmax or sigmoid scores;
// greedy, group-limited greedy or DeepSeek-V3's noaux_tc selection), run each expert over the
// tokens routed to it, and add the shared experts, which every token passes through.
#include <algorithm>
#include <cmath>
#include <limits>

#include "model/model.h"

namespace mlaserve {
namespace {

// Indices of the k largest values (ties: lower index first), in descending order.
void TopK(const float* values, int count, int k, int32_t* out) {
  for (int i = 0; i < k; ++i) out[i] = -1;
  for (int e = 0; e < count; ++e) {
    // Insertion into the sorted top list; k is small (<= 8 in practice).
    int pos = k;
    while (pos > 0 && (out[pos - 1] < 0 || values[e] > values[out[pos - 1]])) --pos;
    if (pos >= k) continue;
    for (int j = k - 1; j > pos; --j) out[j] = out[j - 1];
    out[pos] = e;
  }
}

}  // namespace

// scratch: [2 * n_routed_experts + n_group] floats.
void Model::RouteToken(const MoeWeights& w, const float* logits, float* scratch, int32_t* ids,
                       float* weights) const {
  const ModelConfig& c = config_;
  const int E = c.n_routed_experts, k = c.num_experts_per_tok;
  float* scores = scratch;          // [E] unbiased routing scores
  float* choice = scratch + E;      // [E] what selection ranks (biased for noaux_tc, masked)
  float* group_scores = scratch + 2 * E;  // [n_group]

  if (c.scoring_func == ScoringFunc::kSoftmax) {
    std::copy(logits, logits + E, scores);
    Softmax(std::span<float>(scores, size_t(E)));
  } else {
    for (int e = 0; e < E; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  for (int e = 0; e < E; ++e) {
    choice[e] = scores[e];
    if (c.topk_method == TopkMethod::kNoauxTc) choice[e] += w.correction_bias[size_t(e)];
  }

  if (c.topk_method != TopkMethod::kGreedy && c.n_group > 1) {
    // Keep only the topk_group best groups. Group score: max (V2) or sum of the top two (noaux_tc).
    const int per_group = E / c.n_group;
    for (int g = 0; g < c.n_group; ++g) {
      const float* member = choice + g * per_group;
      if (c.topk_method == TopkMethod::kNoauxTc) {
        int32_t top2[2];
        TopK(member, per_group, 2, top2);
        group_scores[g] = member[top2[0]] + member[top2[1]];
      } else {
        group_scores[g] = *std::max_element(member, member + per_group);
      }
    }
    int32_t kept[64];
    const int keep = std::min(c.topk_group, 64);
    TopK(group_scores, c.n_group, keep, kept);
    for (int g = 0; g < c.n_group; ++g) {
      if (std::find(kept, kept + keep, g) != kept + keep) continue;
      std::fill(choice + g * per_group, choice + (g + 1) * per_group,
                -std::numeric_limits<float>::infinity());
    }
  }

  TopK(choice, E, k, ids);
  float sum = 0.0f;
  for (int i = 0; i < k; ++i) {
    weights[i] = scores[ids[i]];
    sum += weights[i];
  }
  const bool normalize = c.norm_topk_prob && k > 1;
  // DeepSeek-V2 scales only unnormalised weights; V3 scales after normalising.
  const bool scale = c.family == ModelFamily::kDeepSeekV3 || !normalize;
  for (int i = 0; i < k; ++i) {
    if (normalize) weights[i] /= sum + 1e-20f;
    if (scale) weights[i] *= float(c.routed_scaling_factor);
  }
}

void Model::Moe(const ComputeContext& ctx, const MoeWeights& w, int n) {
  const ModelConfig& c = config_;
  Workspace& ws = workspace_;
  const int E = c.n_routed_experts, k = c.num_experts_per_tok;
  const int64_t H = c.hidden_size;

  // Router in fp32.
  MatMul(ctx, ws.normed.data(), n, w.router, ws.router_logits.data());
  for (int t = 0; t < n; ++t) {
    RouteToken(w, ws.router_logits.data() + int64_t(t) * E, ws.router_scratch.data(),
               ws.topk_ids.data() + int64_t(t) * k, ws.topk_weights.data() + int64_t(t) * k);
  }

  // Group (token, weight) pairs by expert: counting sort into expert_tokens.
  std::fill(ws.expert_offsets.begin(), ws.expert_offsets.end(), 0);
  for (int i = 0; i < n * k; ++i) ++ws.expert_offsets[size_t(ws.topk_ids[size_t(i)] + 1)];
  for (int e = 0; e < E; ++e) ws.expert_offsets[size_t(e + 1)] += ws.expert_offsets[size_t(e)];
  std::copy(ws.expert_offsets.begin(), ws.expert_offsets.end() - 1, ws.expert_cursor.begin());
  for (int i = 0; i < n * k; ++i) {
    const int32_t slot = ws.expert_cursor[size_t(ws.topk_ids[size_t(i)])]++;
    ws.expert_tokens[size_t(slot)] = i / k;
    ws.expert_token_weights[size_t(slot)] = ws.topk_weights[size_t(i)];
  }

  std::fill(ws.proj.begin(), ws.proj.begin() + int64_t(n) * H, 0.0f);
  for (int e = 0; e < E; ++e) {
    const int begin = ws.expert_offsets[size_t(e)], end = ws.expert_offsets[size_t(e + 1)];
    const int count = end - begin;
    if (count == 0) continue;
    const MlpWeights& expert = w.experts[size_t(e)];
    const int64_t inter = expert.gate.rows;
    for (int i = 0; i < count; ++i) {
      const float* src = ws.normed.data() + int64_t(ws.expert_tokens[size_t(begin + i)]) * H;
      std::copy(src, src + H, ws.expert_in.data() + int64_t(i) * H);
    }
    MatMulPair(ctx, ws.expert_in.data(), count, expert.gate, expert.up, ws.gate.data(), ws.up.data());
    for (int i = 0; i < count; ++i) {
      SiluMul(ws.gate.data() + i * inter, ws.up.data() + i * inter, inter, ws.gate.data() + i * inter);
    }
    MatMul(ctx, ws.gate.data(), count, expert.down, ws.expert_out.data());
    for (int i = 0; i < count; ++i) {
      ctx.kernels->axpy_f32(ws.expert_token_weights[size_t(begin + i)],
                            ws.expert_out.data() + int64_t(i) * H,
                            ws.proj.data() + int64_t(ws.expert_tokens[size_t(begin + i)]) * H, H);
    }
  }

  if (w.has_shared) {
    DenseMlp(ctx, w.shared, n, ws.expert_out.data());
    for (int64_t i = 0; i < int64_t(n) * H; ++i) ws.proj[size_t(i)] += ws.expert_out[size_t(i)];
  }
}

}  // namespace mlaserve
