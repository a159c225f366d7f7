// Tensor parallelism in the forward pass (model/tensor_parallel.h): the shard's set-up, the
// gathers that complete a row-sharded product on every rank, the sharded MLP and logits, and
// rank 0's forward calls replayed on the workers.
#include <algorithm>
#include <cstring>

#include "kvcache/kv_storage.h"
#include "model/model.h"
#include "model/tensor_parallel_weights.h"

namespace mlaserve {
namespace {

// lm_head's rows are gathered on rank 0 this many logits rows at a time ([rows, vocab] staged).
constexpr int kTpLogitsRows = 64;

// The header of a broadcast forward call (kTpCallHeaderBytes, zeros: stop).
struct CallHeader {
  int64_t command;  // kForwardCall, or 0: stop
  int64_t num_tokens, num_segments, num_pages, mode;
  uint64_t storage_uid;
  int64_t format, num_layers, latent_dim, rope_dim, page_size, storage_pages;
  char kernels[32];
};
static_assert(sizeof(CallHeader) <= kTpCallHeaderBytes);
constexpr int64_t kForwardCall = 1;
constexpr int kSegmentInts = 4;  // num_computed_tokens, num_tokens, logits flags, pages sent

}  // namespace

void Model::SetUpTensorParallel(TpCollectives* tp, size_t shard_weight_bytes) {
  const ModelConfig& c = config_;
  tp_ = tp != nullptr && tp->size() > 1 ? tp : nullptr;
  local_heads_ = c.num_attention_heads;
  expert_begin_ = 0;
  expert_end_ = std::max(0, c.n_routed_experts);
  if (tp_ == nullptr) return;
  const int ranks = tp_->size(), rank = tp_->rank();
  shard_weight_bytes_ = shard_weight_bytes;
  local_heads_ = int(ShardRange(c.num_attention_heads, 1, rank, ranks).count());
  const ShardRangeResult experts = ShardRange(c.n_routed_experts, 1, rank, ranks);
  expert_begin_ = int(experts.begin);
  expert_end_ = int(experts.end);
  tp_attn_counts_ = ShardCounts(c.num_attention_heads, 1, ranks, c.v_head_dim);
  tp_row_counts_.assign(size_t(ranks), 0);
  tp_block_counts_.assign(size_t(ranks), 0);
  Workspace& ws = workspace_;
  const int64_t N = ws.max_tokens, H = c.hidden_size;
  const int64_t inter = std::max<int64_t>(c.intermediate_size, int64_t(c.n_shared_experts) * c.moe_intermediate_size);
  const int64_t widest = std::max({int64_t(c.num_attention_heads) * c.v_head_dim, inter, H});
  ws.tp_stage.assign(size_t(std::max(N * widest, int64_t(kTpLogitsRows) * c.vocab_size)), 0.0f);
  ws.tp_full.assign(size_t(N * std::max(int64_t(c.num_attention_heads) * c.v_head_dim, inter)), 0.0f);
  ws.tp_local.assign(size_t(std::max(N * H, int64_t(kTpLogitsRows) * c.vocab_size)), 0.0f);
}

std::span<const int64_t> Model::RowShardCounts(int64_t total_rows, const WeightMatrix& m) {
  const int64_t unit = ShardRowUnit(m);
  for (int r = 0; r < tp_->size(); ++r) {
    tp_row_counts_[size_t(r)] = ShardRange(total_rows, unit, r, tp_->size()).count();
  }
  return tp_row_counts_;
}

void Model::GatherColumns(const float* local, int n, std::span<const int64_t> per_token, float* out, bool root_only) {
  const int ranks = tp_->size(), me = tp_->rank();
  float* stage = workspace_.tp_stage.data();  // block r: [n, per_token[r]] at n * (columns before r)
  int64_t total = 0, mine = 0;
  for (int r = 0; r < ranks; ++r) {
    if (r == me) mine = total;
    total += per_token[size_t(r)];
    tp_block_counts_[size_t(r)] = per_token[size_t(r)] * n;
  }
  std::copy(local, local + int64_t(n) * per_token[size_t(me)], stage + int64_t(n) * mine);
  if (root_only) {
    tp_->GatherToRoot(stage, tp_block_counts_);
    if (me != 0) return;
  } else {
    tp_->AllGather(stage, tp_block_counts_);
  }
  ForTokenRanges(n, [&](int begin, int end, int) {
    for (int64_t r = 0, first = 0; r < ranks; first += per_token[size_t(r)], ++r) {
      const int64_t cols = per_token[size_t(r)];
      const float* block = stage + int64_t(n) * first;
      for (int t = begin; t < end; ++t) std::copy(block + t * cols, block + (t + 1) * cols, out + t * total + first);
    }
  });
}

void Model::ShardedMlp(const ComputeContext& ctx, const MlpWeights& w, const float* x, int n, int64_t full_inter,
                       float* out) {
  Workspace& ws = workspace_;
  const KernelSet& k = *ctx.kernels;
  const int64_t inter = w.gate.rows;  // this rank's rows of the intermediate
  MatMulPair(ctx, x, n, w.gate, w.up, ws.gate.data(), ws.up.data());
  ForTokenRanges(n, [&](int begin, int end, int) {
    for (int t = begin; t < end; ++t) {
      float* g = ws.gate.data() + t * inter;
      k.silu_mul(g, ws.up.data() + t * inter, inter, g);
    }
  });
  GatherColumns(ws.gate.data(), n, RowShardCounts(full_inter, w.gate), ws.tp_full.data(), false);
  MatMul(ctx, ws.tp_full.data(), n, w.down, ws.tp_local.data());
  GatherColumns(ws.tp_local.data(), n, RowShardCounts(config_.hidden_size, w.down), out, false);
}

void Model::ShardedLogits(const ComputeContext& ctx, int num_rows, float* logits) {
  const int64_t H = config_.hidden_size, V = config_.vocab_size;
  for (int row0 = 0; row0 < num_rows; row0 += kTpLogitsRows) {
    const int rows = std::min(kTpLogitsRows, num_rows - row0);
    MatMul(ctx, workspace_.last_hidden.data() + row0 * H, rows, weights_.lm_head, workspace_.tp_local.data());
    GatherColumns(workspace_.tp_local.data(), rows, RowShardCounts(V, weights_.lm_head),
                  logits == nullptr ? nullptr : logits + row0 * V, true);
  }
}

void Model::BroadcastForwardCall(const KernelSet& kernels, KvStorage& kv, std::span<const TokenId> tokens,
                                 std::span<const ForwardSegment> segments, LogitsMode mode) {
  const KvStorageShape& shape = kv.shape();
  const KvHostRows rows = kv.HostRows();
  tp_call_.clear();
  tp_call_.insert(tp_call_.end(), tokens.begin(), tokens.end());
  int64_t num_pages = 0;
  for (const ForwardSegment& seg : segments) {
    const int64_t pages = (seg.num_computed_tokens + seg.num_tokens + shape.page_size - 1) / shape.page_size;
    const int32_t logits_flags = (seg.all_logits ? 1 : 0) | (seg.no_logits ? 2 : 0);
    tp_call_.insert(tp_call_.end(), {seg.num_computed_tokens, seg.num_tokens, logits_flags, int32_t(pages)});
    num_pages += pages;
  }
  for (const ForwardSegment& seg : segments) {
    const int64_t pages = (seg.num_computed_tokens + seg.num_tokens + shape.page_size - 1) / shape.page_size;
    tp_call_.insert(tp_call_.end(), seg.pages.begin(), seg.pages.begin() + pages);
  }
  for (int l = 0; l < shape.num_layers; ++l) {  // the format's scales (a storage's may change)
    int32_t bits;
    const float scale = rows.tensor_scale(l);
    std::memcpy(&bits, &scale, 4);
    tp_call_.push_back(bits);
  }
  alignas(8) char header_bytes[kTpCallHeaderBytes] = {};
  CallHeader header{.command = kForwardCall,
                    .num_tokens = int64_t(tokens.size()),
                    .num_segments = int64_t(segments.size()),
                    .num_pages = num_pages,
                    .mode = int64_t(mode),
                    .storage_uid = kv.uid(),
                    .format = int64_t(shape.format),
                    .num_layers = shape.num_layers,
                    .latent_dim = shape.latent_dim,
                    .rope_dim = shape.rope_dim,
                    .page_size = shape.page_size,
                    .storage_pages = shape.num_pages,
                    .kernels = {}};
  std::strncpy(header.kernels, kernels.name, sizeof header.kernels - 1);
  std::memcpy(header_bytes, &header, sizeof header);
  tp_->Broadcast(header_bytes, kTpCallHeaderBytes, /*idle=*/true);  // the workers wait idle for it
  tp_->Broadcast(tp_call_.data(), int64_t(tp_call_.size()) * 4, false);
}

Status Model::RunTpWorker() {
  if (tp_ == nullptr || tp_->rank() == 0) return Status::Error("RunTpWorker runs on tensor-parallel ranks 1..");
  // Rank 0's storages, mirrored by uid (a handful per job: created on first sight, kept).
  std::vector<std::pair<uint64_t, std::unique_ptr<HostKvStorage>>> storages;
  std::vector<ForwardSegment> segments;
  std::vector<float> scales;
  for (;;) {
    alignas(8) char header_bytes[kTpCallHeaderBytes];
    tp_->Broadcast(header_bytes, kTpCallHeaderBytes, /*idle=*/true);
    CallHeader h;
    std::memcpy(&h, header_bytes, sizeof h);
    if (h.command != kForwardCall) return Status::Ok();
    const int64_t ints = h.num_tokens + kSegmentInts * h.num_segments + h.num_pages + h.num_layers;
    tp_call_.resize(size_t(ints));
    tp_->Broadcast(tp_call_.data(), ints * 4, false);

    const KvStorageShape shape{.format = KvFormat(h.format),
                               .num_layers = int(h.num_layers),
                               .latent_dim = int(h.latent_dim),
                               .rope_dim = int(h.rope_dim),
                               .page_size = int(h.page_size),
                               .num_pages = h.storage_pages};
    auto it = std::find_if(storages.begin(), storages.end(), [&](const auto& s) { return s.first == h.storage_uid; });
    if (it == storages.end()) {
      auto created = HostKvStorage::Create(shape);
      if (!created.ok()) return Status::Error("mirroring rank 0's KV storage: " + created.error());
      storages.emplace_back(h.storage_uid, std::move(created).value());
      it = storages.end() - 1;
    }
    HostKvStorage& kv = *it->second;
    const int32_t* p = tp_call_.data();
    const std::span<const TokenId> tokens(p, size_t(h.num_tokens));
    const int32_t* seg_ints = p + h.num_tokens;
    const PageId* pages = seg_ints + kSegmentInts * h.num_segments;
    scales.resize(size_t(h.num_layers));
    std::memcpy(scales.data(), pages + h.num_pages, size_t(h.num_layers) * 4);
    bool same_scales = true;
    for (int l = 0; l < h.num_layers; ++l) same_scales = same_scales && kv.tensor_scale(l) == scales[size_t(l)];
    if (!same_scales) MLA_RETURN_IF_ERROR(kv.SetTensorScales(scales));
    segments.clear();
    for (int64_t s = 0; s < h.num_segments; ++s, seg_ints += kSegmentInts) {
      segments.push_back(ForwardSegment{.pages = std::span<const PageId>(pages, size_t(seg_ints[3])),
                                        .num_computed_tokens = seg_ints[0],
                                        .num_tokens = seg_ints[1],
                                        .all_logits = (seg_ints[2] & 1) != 0,
                                        .no_logits = (seg_ints[2] & 2) != 0});
      pages += seg_ints[3];
    }
    auto kernels = KernelsByName(h.kernels);
    if (!kernels.ok()) return kernels.status();
    MLA_RETURN_IF_ERROR(Forward(**kernels, kv, tokens, segments, LogitsMode(h.mode), nullptr));
  }
}

}  // namespace mlaserve
