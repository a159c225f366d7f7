// Mixture of experts: route each token to top-k routed experts (softmax or sigmoid scores;
// greedy, group-limited greedy or DeepSeek-V3's noaux_tc selection), run each expert over the
// tokens routed to it, and add the shared experts, which every token passes through.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

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

namespace {

// y[count, ldy] columns [panel_begin * 16, min(rows, panel_end * 16)) = x @ W^T for those rows,
// through the packed-activation product when xp holds x packed (bit-identical either way).
// scratch: the calling thread's GemmThreadScratchFloats(count) floats.
void MatMulTile(const KernelSet& k, const float* x, const float* xp, float* scratch, int64_t count,
                const WeightMatrix& w, int64_t panel_begin, int64_t panel_end, float* y, int64_t ldy) {
  if (xp != nullptr) {
    k.matmul_panels_packed(x, xp, scratch, count, w, panel_begin, panel_end, y, ldy);
  } else if (w.packed) {
    k.matmul_panels(x, count, w, panel_begin, panel_end, y, ldy);
  } else {
    k.matmul_rows(x, count, w, panel_begin * kPanelRows, std::min(w.rows, panel_end * kPanelRows), y, ldy);
  }
}

void WaitUntilZero(const std::atomic<int32_t>& counter) {
  for (int spins = 0; counter.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins >= 64) std::this_thread::yield();
  }
}

}  // namespace

void Model::RunMlps(const ComputeContext& ctx, int num_groups) {
  Workspace& ws = workspace_;
  const KernelSet& k = *ctx.kernels;
  const int64_t H = config_.hidden_size;
  const int threads = pool_.num_threads();
  std::span<MlpGroup> groups(ws.mlp_groups.data(), size_t(num_groups));
  // The largest groups first, so that their down tiles (queued in the same order) find their
  // gate/up tiles long done; ties by index. The order changes no result.
  std::sort(groups.begin(), groups.end(), [](const MlpGroup& a, const MlpGroup& b) {
    return a.count > b.count || (a.count == b.count && a.id < b.id);
  });
  // Groups with enough tokens read packed activations (ops.h PackedProductPays), largest first
  // while ctx.gemm_scratch has room (a dense MLP and the shared experts always fit; routed
  // experts rarely have that many tokens): after each thread's own block, sized for the largest
  // group, one region per group holds its input packed, then its down input (the input is dead
  // once its gate/up tiles ran).
  const int64_t thread_floats = GemmThreadScratchFloats(groups.empty() ? 0 : groups[0].count);
  int64_t scratch_used = threads * thread_floats;
  for (MlpGroup& group : groups) {
    const MlpWeights& w = *group.w;
    group.packed = nullptr;
    // (One packing serves gate and up, so they must take the same layout: SharePackedActivations.)
    if (!PackedProductPays(k, group.count, w.gate) || !PackedProductPays(k, group.count, w.up) ||
        !PackedProductPays(k, group.count, w.down) || !SharePackedActivations(w.gate, w.up)) {
      continue;
    }
    const int64_t floats = std::max(PackedFloatsFor(k, group.count, w.gate), PackedFloatsFor(k, group.count, w.down));
    if (scratch_used + floats > int64_t(ctx.gemm_scratch.size())) continue;
    group.packed = ctx.gemm_scratch.data() + scratch_used;
    scratch_used += floats;
  }

  // Two queues. A group of at most one token tile (kGemmTileTokens) reads each weight once for
  // a handful of tokens (packed or not: an int8 table packs any group): it streams memory, where
  // the larger groups multiply weights held in cache. The compute queue holds the larger groups,
  // the streaming queue the small ones (a prefill's rarely chosen experts; every group of a decode
  // step of up to 12 sequences), each as: its groups' gathers and packings, then their gate/up
  // tiles, then their down tiles. With more than one thread, most take the compute queue first,
  // the last quarter (at least one) the streaming queue first, each turning to the other queue
  // when its own is empty: so while some threads multiply, others read the small experts' weights,
  // instead of every thread waiting on memory at the end.
  const auto streams = [](const MlpGroup& group) { return group.count <= kGemmTileTokens; };
  int num_tiles = 0;
  const auto enqueue = [&](bool streaming) {
    for (int g = 0; g < num_groups; ++g) {
      const MlpGroup& group = groups[size_t(g)];
      if (streams(group) != streaming) continue;
      const bool prepare = group.gather_rows != nullptr || group.packed != nullptr;
      if (prepare) ws.mlp_tiles[size_t(num_tiles++)] = {MlpTile::kPrepare, g, 0, 0};
      ws.mlp_pending_prepare[size_t(g)].store(prepare ? 1 : 0, std::memory_order_relaxed);
    }
    for (int g = 0; g < num_groups; ++g) {
      const MlpGroup& group = groups[size_t(g)];
      if (streams(group) != streaming) continue;
      const WeightMatrix& gate = group.w->gate;
      const int64_t per_tile = PanelGrain(k, group.count, gate, group.packed != nullptr, threads);
      int32_t tiles = 0;
      for (int64_t p = 0; p < gate.num_panels(); p += per_tile, ++tiles) {
        ws.mlp_tiles[size_t(num_tiles++)] = {MlpTile::kGateUp, g, int32_t(p), int32_t(std::min(gate.num_panels(), p + per_tile))};
      }
      // + 1: the down input's packing, done by whichever thread finishes the last gate/up tile.
      ws.mlp_pending_gate_up[size_t(g)].store(tiles + (group.packed != nullptr ? 1 : 0), std::memory_order_relaxed);
    }
    for (int g = 0; g < num_groups; ++g) {
      const MlpGroup& group = groups[size_t(g)];
      if (streams(group) != streaming) continue;
      const WeightMatrix& down = group.w->down;
      const int64_t per_tile = PanelGrain(k, group.count, down, group.packed != nullptr, threads);
      for (int64_t p = 0; p < down.num_panels(); p += per_tile) {
        ws.mlp_tiles[size_t(num_tiles++)] = {MlpTile::kDown, g, int32_t(p), int32_t(std::min(down.num_panels(), p + per_tile))};
      }
    }
  };
  enqueue(false);
  const int32_t streaming_begin = num_tiles;  // tiles [0, streaming_begin): compute; the rest: streaming
  enqueue(true);
  const int stream_first_threads = std::max(1, threads / 4);

  // Every thread takes the next tile of a queue until neither has one left. A tile waits only for
  // tiles queued before it in its own queue, which other threads have already taken (and which
  // wait only for earlier ones), so the waits always end.
  struct Queue {
    std::atomic<int32_t> next;  // the next tile to take
    int32_t end;                // one past the queue's last tile
  };
  Queue compute{{0}, streaming_begin}, streaming{{streaming_begin}, num_tiles};
  pool_.RunOnAll([&](int thread) {
    // The thread's block of the scratch (used only when some group is packed, which needs it).
    float* scratch = ctx.gemm_scratch.empty() ? nullptr : ctx.gemm_scratch.data() + thread * thread_floats;
    const bool streaming_first = threads > 1 && thread >= threads - stream_first_threads;
    Queue* const order[2] = {streaming_first ? &streaming : &compute, streaming_first ? &compute : &streaming};
    const auto take = [&]() -> int32_t {
      for (Queue* q : order) {
        if (q->next.load(std::memory_order_relaxed) >= q->end) continue;  // spares the line a write
        const int32_t i = q->next.fetch_add(1, std::memory_order_relaxed);
        if (i < q->end) return i;
      }
      return -1;
    };
    for (int32_t i = take(); i >= 0; i = take()) {
      const MlpTile& tile = ws.mlp_tiles[size_t(i)];
      const MlpGroup& group = groups[size_t(tile.group)];
      const MlpWeights& w = *group.w;
      const int64_t inter = w.gate.rows;
      switch (tile.kind) {
        case MlpTile::kPrepare:
          for (int r = 0; group.gather_rows != nullptr && r < group.count; ++r) {
            const float* src = group.gather_source + int64_t(group.gather_rows[r]) * H;
            std::copy(src, src + H, group.x + int64_t(r) * H);
          }
          if (group.packed != nullptr) k.pack_activations(group.x, group.count, w.gate, 0, GemmTiles(group.count), group.packed);
          ws.mlp_pending_prepare[size_t(tile.group)].store(0, std::memory_order_release);
          break;
        case MlpTile::kGateUp: {
          WaitUntilZero(ws.mlp_pending_prepare[size_t(tile.group)]);
          MatMulTile(k, group.x, group.packed, scratch, group.count, w.gate, tile.panel_begin, tile.panel_end, group.gate, inter);
          MatMulTile(k, group.x, group.packed, scratch, group.count, w.up, tile.panel_begin, tile.panel_end, group.up, inter);
          const int64_t r0 = int64_t(tile.panel_begin) * kPanelRows;
          const int64_t r1 = std::min(inter, int64_t(tile.panel_end) * kPanelRows);
          for (int t = 0; t < group.count; ++t) {
            float* g = group.gate + t * inter + r0;
            k.silu_mul(g, group.up + t * inter + r0, r1 - r0, g);
          }
          std::atomic<int32_t>& pending = ws.mlp_pending_gate_up[size_t(tile.group)];
          if (pending.fetch_sub(1, std::memory_order_acq_rel) == 2 && group.packed != nullptr) {
            // The last gate/up tile (only the packing's count is left): pack the down input.
            k.pack_activations(group.gate, group.count, w.down, 0, GemmTiles(group.count), group.packed);
            pending.fetch_sub(1, std::memory_order_acq_rel);
          }
          break;
        }
        case MlpTile::kDown:
          WaitUntilZero(ws.mlp_pending_gate_up[size_t(tile.group)]);
          MatMulTile(k, group.gate, group.packed, scratch, group.count, w.down, tile.panel_begin, tile.panel_end, group.out, H);
          break;
      }
    }
  });
}

void Model::DenseMlp(const ComputeContext& ctx, const MlpWeights& w, int n, float* out) {
  if (tp_ != nullptr) return ShardedMlp(ctx, w, workspace_.normed.data(), n, config_.intermediate_size, out);
  Workspace& ws = workspace_;
  ws.mlp_groups[0] = MlpGroup{.id = 0, .w = &w, .x = ws.normed.data(), .count = n, .gate = ws.gate.data(),
                              .up = ws.up.data(), .out = out};
  RunMlps(ctx, 1);
}

void Model::Moe(const ComputeContext& ctx, const MoeWeights& w, int n) {
  const ModelConfig& c = config_;
  Workspace& ws = workspace_;
  const KernelSet& kernels = *ctx.kernels;
  const int E = c.n_routed_experts, k = c.num_experts_per_tok;
  const int64_t H = c.hidden_size;
  const int64_t inter = c.moe_intermediate_size;

  PhaseClock clock(timings_);
  // Router in fp32, then each token's top-k (each thread with its own scratch).
  MatMul(ctx, ws.normed.data(), n, w.router, ws.router_logits.data());
  const size_t scratch_floats = ws.router_scratch.size() / size_t(pool_.num_threads());
  ForTokenRanges(n, [&](int begin, int end, int thread) {
    float* scratch = ws.router_scratch.data() + size_t(thread) * scratch_floats;
    for (int t = begin; t < end; ++t) {
      RouteToken(w, ws.router_logits.data() + int64_t(t) * E, scratch, ws.topk_ids.data() + int64_t(t) * k,
                 ws.topk_weights.data() + int64_t(t) * k);
    }
  });

  // Blocks of at most moe_block_tokens tokens (the per-slot buffers' size). A token's result
  // does not depend on its block.
  for (int block = 0; block < n; block += ws.moe_block_tokens) {
    const int m = std::min(ws.moe_block_tokens, n - block);
    const int32_t* ids = ws.topk_ids.data() + int64_t(block) * k;
    // Slots grouped by expert (counting sort): expert e has slots [offsets[e], offsets[e + 1]),
    // so a token's slots in ascending order are its experts in ascending order.
    std::fill(ws.expert_offsets.begin(), ws.expert_offsets.end(), 0);
    for (int i = 0; i < m * k; ++i) ++ws.expert_offsets[size_t(ids[i] + 1)];
    for (int e = 0; e < E; ++e) ws.expert_offsets[size_t(e + 1)] += ws.expert_offsets[size_t(e)];
    std::copy(ws.expert_offsets.begin(), ws.expert_offsets.end() - 1, ws.expert_cursor.begin());
    for (int i = 0; i < m * k; ++i) {
      const int32_t slot = ws.expert_cursor[size_t(ids[i])]++;
      ws.expert_tokens[size_t(slot)] = block + i / k;
      ws.expert_token_weights[size_t(slot)] = ws.topk_weights[size_t(int64_t(block) * k + i)];
      ws.token_slots[size_t(i)] = slot;
    }

    // Under tensor parallelism this rank runs its own experts [expert_begin_, expert_end_) only
    // (all of them on one rank), and the shared experts by rows (ShardedMlp) after them.
    int num_groups = 0;
    for (int e = expert_begin_; e < expert_end_; ++e) {
      const int begin = ws.expert_offsets[size_t(e)], count = ws.expert_offsets[size_t(e + 1)] - begin;
      if (count == 0) continue;
      ws.mlp_groups[size_t(num_groups++)] = MlpGroup{
          .id = e, .w = &w.experts[size_t(e)], .x = ws.moe_rows.data() + begin * H, .count = count,
          .gate = ws.moe_gate.data() + begin * inter, .up = ws.moe_up.data() + begin * inter,
          // The gathered rows are read only by the group's own gate/up tiles, all done before
          // its down tiles write: the output reuses them.
          .out = ws.moe_rows.data() + begin * H, .gather_source = ws.normed.data(),
          .gather_rows = ws.expert_tokens.data() + begin};
    }
    if (timings_ != nullptr) {
      timings_->routed_experts_run += num_groups;
      ++timings_->moe_blocks;
    }
    if (w.has_shared && tp_ == nullptr) {
      ws.mlp_groups[size_t(num_groups++)] = MlpGroup{
          .id = E, .w = &w.shared, .x = ws.normed.data() + int64_t(block) * H, .count = m,
          .gate = ws.gate.data(), .up = ws.up.data(), .out = ws.expert_out.data() + int64_t(block) * H};
    }
    clock.Add(&ForwardTimings::router_ns);
    if (num_groups > 0) RunMlps(ctx, num_groups);
    clock.Add(&ForwardTimings::mlp_ns);
    // Tensor parallelism outside deterministic mode: each rank sums its own experts' outputs and
    // one all-reduce adds the ranks' sums (model/tensor_parallel.h).
    const bool reduce_partial_sums = tp_ != nullptr && !deterministic_;
    const int own_slots_begin = ws.expert_offsets[size_t(expert_begin_)];
    const int own_slots_end = ws.expert_offsets[size_t(expert_end_)];
    if (tp_ != nullptr && !reduce_partial_sums) {
      // Every rank's experts' outputs: rank r's slots are those of its experts, contiguous and in
      // rank order in moe_rows, so one in-place all-gather completes every slot everywhere.
      for (int r = 0; r < tp_->size(); ++r) {
        const ShardRangeResult experts = ShardRange(E, 1, r, tp_->size());
        tp_block_counts_[size_t(r)] =
            int64_t(ws.expert_offsets[size_t(experts.end)] - ws.expert_offsets[size_t(experts.begin)]) * H;
      }
      tp_->AllGather(ws.moe_rows.data(), tp_block_counts_);
    }
    clock.Add(&ForwardTimings::router_ns);
    if (tp_ != nullptr && w.has_shared) {
      ShardedMlp(ctx, w.shared, ws.normed.data() + int64_t(block) * H, m, int64_t(c.n_shared_experts) * inter,
                 ws.expert_out.data() + int64_t(block) * H);
      clock.Add(&ForwardTimings::mlp_ns);
    }

    // proj[t] = sum over t's routed experts, in ascending expert order, of weight * output,
    // then + the shared experts' output: the order of the reference (one expert at a time).
    ForTokenRanges(m, [&](int begin, int end, int) {
      for (int t = begin; t < end; ++t) {
        int32_t* slots = ws.token_slots.data() + int64_t(t) * k;
        std::sort(slots, slots + k);
        float* row = ws.proj.data() + int64_t(block + t) * H;
        std::fill(row, row + H, 0.0f);
        for (int j = 0; j < k; ++j) {
          if (reduce_partial_sums && (slots[j] < own_slots_begin || slots[j] >= own_slots_end)) continue;
          kernels.axpy_f32(ws.expert_token_weights[size_t(slots[j])], ws.moe_rows.data() + slots[j] * H, row, H);
        }
        if (w.has_shared && (!reduce_partial_sums || tp_->rank() == 0)) {  // counted once in the sum
          const float* shared = ws.expert_out.data() + int64_t(block + t) * H;
          for (int64_t i = 0; i < H; ++i) row[i] += shared[i];
        }
      }
    });
    if (reduce_partial_sums) tp_->AllReduceSum(ws.proj.data() + int64_t(block) * H, int64_t(m) * H);
    clock.Add(&ForwardTimings::router_ns);
  }
}

}  // namespace mlaserve
