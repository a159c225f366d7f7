// Model loading and the layer loop. Attention lives in mla_attention.cc, MoE in moe.cc.
#include "model/model.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/float16.h"
#include "core/log.h"
#include "model/absorbed_weights.h"
#include "model/tensor_parallel_weights.h"

namespace mlaserve {

Model::Model(ModelConfig config, std::unique_ptr<Checkpoint> checkpoint, ModelWeights weights,
             const ModelOptions& options, int max_context, int num_threads)
    : config_(std::move(config)),
      deterministic_(options.deterministic),
      checkpoint_(std::move(checkpoint)),
      weights_(std::move(weights)),
      pool_(num_threads),
      rope_(config_, max_context),
      workspace_(config_, options.max_batch_tokens, max_context, num_threads, options.moe_block_tokens,
                 weights_.has_mtp),
      token_positions_(size_t(options.max_batch_tokens)),
      token_segments_(size_t(options.max_batch_tokens)),
      parallel_tokens_(int(std::max<int64_t>(2, kParallelFloats / std::max(1, config_.hidden_size)))) {
  capture_layers_ = options.capture_layers;
  capture_slot_.assign(size_t(config_.num_hidden_layers + 1), -1);
  for (size_t c = 0; c < capture_layers_.size(); ++c) capture_slot_[size_t(capture_layers_[c])] = int(c);
  workspace_.captured.resize(size_t(options.max_batch_tokens) * size_t(captured_width()));
}

namespace {

// DeepSeek-V3/R1 checkpoints carry their multi-token-prediction (nextn) layers as
// model.layers.{num_hidden_layers + k}.*. Those ModelOptions::load_mtp does not bind (all, or
// all past the first) are never read: their bytes do not count against the KV budget
// (Model::weight_bytes), and one debug line says so (at info it would precede every command's
// one-line errors on the bundled model). Returns their bytes.
size_t SkippedMtpLayerBytes(const ModelConfig& config, const Checkpoint& checkpoint, bool load_mtp) {
  const std::string prefix = config.tensor_prefix + "model.layers.";
  size_t num_tensors = 0, num_bytes = 0;
  int first_layer = -1, last_layer = -1;
  for (const auto& [name, view] : checkpoint.tensors()) {
    if (!name.starts_with(prefix)) continue;
    const int layer = std::atoi(name.c_str() + prefix.size());
    if (layer < config.num_hidden_layers + (load_mtp ? 1 : 0)) continue;
    ++num_tensors;
    num_bytes += view.num_bytes;
    first_layer = first_layer < 0 ? layer : std::min(first_layer, layer);
    last_layer = std::max(last_layer, layer);
  }
  if (num_tensors == 0) return 0;
  Log(LogLevel::kDebug, "mlaserve: skipping MTP (nextn) layer%s %d%s: %zu tensors, %.1f MB, not loaded",
      first_layer == last_layer ? "" : "s", first_layer,
      first_layer == last_layer ? "" : ("-" + std::to_string(last_layer)).c_str(), num_tensors,
      double(num_bytes) / 1e6);
  return num_bytes;
}

// After packing, only the embedding and kv_b_proj (read by rows, with their scales) are read from
// the mapping; every other tensor's pages (packed matrices, kv_b's per-head copies' split pair,
// norms copied to fp32, MTP layers) are given back, so resident weights are about the
// checkpoint's bytes, not twice them; a GGUF's block tensors, split into memory at load, are freed.
// (A tensor-parallel rank's kv_b is a slice: its view points inside the tensor.)
void ReleaseCopiedPages(const ModelWeights& weights, const Checkpoint& checkpoint) {
  std::vector<const std::byte*> in_use;
  auto keep = [&](const WeightMatrix& m) {
    in_use.push_back(static_cast<const std::byte*>(m.data));
    in_use.push_back(static_cast<const std::byte*>(m.scales));  // a GGUF block type's, in a tensor of their own
  };
  keep(weights.embed);
  for (const LayerWeights& layer : weights.layers) keep(layer.attn.kv_b);
  if (weights.has_mtp) keep(weights.mtp.block.attn.kv_b);
  std::sort(in_use.begin(), in_use.end());
  for (const auto& [name, view] : checkpoint.tensors()) {
    const std::byte* begin = view.data;
    const auto first = std::lower_bound(in_use.begin(), in_use.end(), begin);
    if (first == in_use.end() || *first >= begin + std::max<size_t>(1, view.num_bytes)) checkpoint.FreePages(view);
  }
}

}  // namespace

Result<std::unique_ptr<Model>> Model::Load(const std::string& model_dir,
                                           const ModelOptions& options) {
  auto config = LoadModelConfig(model_dir);
  if (!config.ok()) return config.status();
  auto checkpoint = Checkpoint::Open(model_dir, options.num_threads);
  if (!checkpoint.ok()) return checkpoint.status();
  const TpShard shard{.rank = options.tp == nullptr ? 0 : options.tp->rank(),
                      .size = options.tp == nullptr ? 1 : options.tp->size()};
  if (options.load_mtp && shard.size > 1) {
    return Status::Error("the MTP layer (NEXTN speculative decoding) is not supported with tensor parallelism");
  }
  for (size_t c = 0; c < options.capture_layers.size(); ++c) {
    const int layer = options.capture_layers[c];
    if (layer < 0 || layer > config->num_hidden_layers || (c > 0 && layer <= options.capture_layers[c - 1])) {
      return Status::Error("hidden-state capture layers must be strictly increasing in [0, " +
                           std::to_string(config->num_hidden_layers) + "] (num_hidden_layers); layer " +
                           std::to_string(layer) + " is not");
    }
  }
  if (!options.capture_layers.empty() && shard.size > 1) {
    return Status::Error("hidden-state capture is not supported with tensor parallelism (--tp-size > 1)");
  }
  auto weights = BindWeights(*config, **checkpoint, options.load_mtp);
  if (!weights.ok()) return weights.status();
  weights = ShardWeights(std::move(weights).value(), *config, shard);
  if (!weights.ok()) return weights.status();
  const size_t shard_bytes = HeldWeightBytes(*weights, *config);
  const size_t skipped_mtp_bytes = SkippedMtpLayerBytes(*config, **checkpoint, options.load_mtp);
  if (options.max_batch_tokens <= 0) return Status::Error("max_batch_tokens must be positive");
  if (options.moe_block_tokens < 0) return Status::Error("moe_block_tokens must be 0 (by memory) or positive");
  int max_context = options.max_context > 0
                        ? options.max_context
                        : std::min(config->max_position_embeddings, 4096);
  if (max_context > config->max_position_embeddings) {
    return Status::Error("context length " + std::to_string(max_context) +
                         " exceeds the model's max_position_embeddings " +
                         std::to_string(config->max_position_embeddings));
  }
  if (shard.size > 1) {
    // MPI counts are int: the widest gather (tensor_parallel_forward.cc) must fit one.
    const int64_t widest = std::max({int64_t(config->num_attention_heads) * config->v_head_dim,
                                     int64_t(config->intermediate_size),
                                     int64_t(config->n_shared_experts) * config->moe_intermediate_size,
                                     int64_t(config->hidden_size)});
    if (int64_t(options.max_batch_tokens) * widest > INT32_MAX) {
      return Status::Error("--max-batch-tokens " + std::to_string(options.max_batch_tokens) +
                           " is too many for tensor parallelism: a gather of " + std::to_string(widest) +
                           " values per token would exceed MPI's int counts");
    }
  }
  int threads = options.num_threads > 0 ? options.num_threads : ThreadPool::DefaultThreadCount();
  std::unique_ptr<Model> model(new Model(std::move(config).value(), std::move(checkpoint).value(),
                                         std::move(weights).value(), options, max_context, threads));
  model->SetUpTensorParallel(options.tp, shard_bytes);
  model->skipped_mtp_bytes_ = skipped_mtp_bytes;
  // Each packed matrix's source is given back as soon as it is copied, so that a GGUF's block
  // tensors (split into memory at load) are not held twice while the rest packs; the embedding,
  // read by rows, is only dropped (a tied lm_head is a view of it).
  const WeightMatrix embed = model->weights_.embed;
  const Checkpoint& held = *model->checkpoint_;
  const auto give_back = [&](const void* data, size_t num_bytes) {
    const auto* p = static_cast<const std::byte*>(data);
    const auto* e = static_cast<const std::byte*>(embed.data);
    const auto* es = static_cast<const std::byte*>(embed.scales);
    const bool embedding = (e != nullptr && p >= e && p < e + embed.total_bytes()) ||
                           (es != nullptr && p >= es && p < es + embed.scale_bytes());
    if (embedding) {
      Checkpoint::ReleaseMappedPages(data, num_bytes);
    } else {
      held.FreeRange(data, num_bytes);
    }
  };
  MLA_RETURN_IF_ERROR(PackWeights(model->weights_, model->pool_, [&](const WeightMatrix& source) {
    give_back(source.data, source.total_bytes());
    if (source.scales != nullptr) {
      // A row slice of a grouped matrix (a tensor-parallel shard) indexes its parent's scale rows.
      const size_t skipped =
          size_t(source.scale_row0) * size_t(source.scale_cols()) * size_t(source.group_scale_bytes());
      give_back(static_cast<const std::byte*>(source.scales) + skipped, source.scale_bytes());
    }
  }));
  MLA_RETURN_IF_ERROR(PackAbsorbedWeights(model->weights_, model->config_, model->pool_));
  ReleaseCopiedPages(model->weights_, *model->checkpoint_);  // a split kv_b pair's too: its copies are made
  return model;
}

void Model::ForTokenRanges(int n, FunctionRef<void(int begin, int end, int thread)> fn) {
  const int threads = pool_.num_threads();
  if (n < parallel_tokens_ || threads == 1) {
    fn(0, n, 0);
    return;
  }
  pool_.RunOnAll([&](int thread) {
    fn(int(int64_t(n) * thread / threads), int(int64_t(n) * (thread + 1) / threads), thread);
  });
}

Status Model::CheckForwardCall(KvStorage& kv, int kv_layers, std::span<const TokenId> tokens,
                               std::span<const ForwardSegment> segments) {
  const ModelConfig& c = config_;
  const int n = int(tokens.size());
  if (n > workspace_.max_tokens) {
    return Status::Error("forward of " + std::to_string(n) + " tokens exceeds max_batch_tokens " +
                         std::to_string(workspace_.max_tokens));
  }
  const KvStorageShape& po = kv.shape();
  if (po.num_layers != kv_layers || po.latent_dim != c.kv_lora_rank || po.rope_dim != c.qk_rope_head_dim) {
    return Status::Error("KV pool shape does not match the model");
  }
  if (kv.HostRows().empty()) return Status::Error("the KV storage has no rows in host memory to compute with");
  int covered = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    const ForwardSegment& seg = segments[s];
    if (seg.num_tokens <= 0) return Status::Error("a forward segment has no tokens");
    const int end = seg.num_computed_tokens + seg.num_tokens;
    if (end > max_context()) {
      return Status::Error("sequence of " + std::to_string(end) +
                           " tokens exceeds the context length " + std::to_string(max_context()));
    }
    if (seg.num_computed_tokens < 0 || int64_t(end) > int64_t(seg.pages.size()) * po.page_size) {
      return Status::Error("forward segment is not covered by reserved KV pages");
    }
    for (PageId page : seg.pages.first(size_t((end + po.page_size - 1) / po.page_size))) {
      if (page < 0 || page >= po.num_pages) {
        return Status::Error("forward segment's KV page " + std::to_string(page) + " is outside the storage");
      }
    }
    if (covered + seg.num_tokens > n) return Status::Error("forward segments do not cover the tokens");
    for (int i = 0; i < seg.num_tokens; ++i) {
      token_positions_[size_t(covered + i)] = seg.num_computed_tokens + i;
      token_segments_[size_t(covered + i)] = int32_t(s);
    }
    covered += seg.num_tokens;
  }
  if (covered != n) return Status::Error("forward segments do not cover the tokens");
  for (TokenId id : tokens) {
    if (id < 0 || id >= c.vocab_size) {
      return Status::Error("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                           std::to_string(c.vocab_size) + ")");
    }
  }
  return Status::Ok();
}

void Model::CaptureLayer(int layer, int n) {
  const int slot = capture_slot_[size_t(layer)];
  if (slot < 0) return;
  Workspace& ws = workspace_;
  const int64_t H = config_.hidden_size;
  const int64_t C = int64_t(capture_layers_.size());
  ForTokenRanges(n, [&](int begin, int end, int) {
    for (int t = begin; t < end; ++t) {
      std::copy_n(ws.hidden.data() + t * H, H, ws.captured.data() + (t * C + slot) * H);
    }
  });
}

void Model::Embed(const KernelSet& k, std::span<const TokenId> tokens) {
  const int64_t H = config_.hidden_size;
  ForTokenRanges(int(tokens.size()), [&](int begin, int end, int) {
    for (int t = begin; t < end; ++t) {
      float* row = workspace_.hidden.data() + t * H;
      std::fill(row, row + H, 0.0f);
      k.axpy_row(1.0f, weights_.embed, tokens[size_t(t)], row);
    }
  });
}

void Model::DecoderLayer(const ComputeContext& ctx, const KvHostRows& kv, const LayerWeights& layer, int kv_layer,
                         int n, std::span<const ForwardSegment> segments, const float* next_norm) {
  Workspace& ws = workspace_;
  const KernelSet& k = *ctx.kernels;
  const int64_t H = config_.hidden_size;
  const double eps = config_.rms_norm_eps;
  if (timings_ == nullptr) {
    Attention(ctx, kv, layer.attn, kv_layer, n, segments);
  } else {
    const auto start = std::chrono::steady_clock::now();
    Attention(ctx, kv, layer.attn, kv_layer, n, segments);
    timings_->attention_ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  }
  // Each residual add is fused with the norm that follows it: hidden += proj; normed =
  // rms_norm(hidden) (after the last layer, the caller's norm).
  ForTokenRanges(n, [&](int begin, int end, int) {
    for (int t = begin; t < end; ++t) {
      k.add_rms_norm(ws.hidden.data() + t * H, ws.proj.data() + t * H, layer.post_attn_norm.data(), H, eps,
                     ws.normed.data() + t * H);
    }
  });
  if (layer.is_moe) {
    Moe(ctx, layer.moe, n);
  } else {
    PhaseClock clock(timings_);
    DenseMlp(ctx, layer.mlp, n, ws.proj.data());
    clock.Add(&ForwardTimings::mlp_ns);
  }
  ForTokenRanges(n, [&](int begin, int end, int) {
    for (int t = begin; t < end; ++t) {
      float* row = ws.hidden.data() + t * H;
      const float* add = ws.proj.data() + t * H;
      if (next_norm == nullptr) {
        for (int64_t i = 0; i < H; ++i) row[i] += add[i];
      } else {
        k.add_rms_norm(row, add, next_norm, H, eps, ws.normed.data() + t * H);
      }
    }
  });
}

int Model::NormOutputRows(const KernelSet& k, const float* norm, int n, std::span<const ForwardSegment> segments,
                          LogitsMode mode) {
  Workspace& ws = workspace_;
  const int64_t H = config_.hidden_size;
  ForTokenRanges(n, [&](int begin, int end, int) {
    for (int t = begin; t < end; ++t) {
      k.rms_norm(ws.hidden.data() + t * H, norm, H, config_.rms_norm_eps, ws.normed.data() + t * H);
    }
  });
  int num_out = 0;
  for (int t = 0; t < n; ++t) {
    const ForwardSegment& seg = segments[size_t(token_segments_[size_t(t)])];
    const bool last_of_segment = t + 1 == n || token_segments_[size_t(t + 1)] != token_segments_[size_t(t)];
    if (mode == LogitsMode::kAllTokens || (last_of_segment && !seg.no_logits) || seg.all_logits) {
      std::copy_n(ws.normed.data() + t * H, H, ws.last_hidden.data() + num_out * H);
      ++num_out;
    }
  }
  return num_out;
}

Status Model::Forward(const KernelSet& kernels, KvStorage& kv, std::span<const TokenId> tokens,
                      std::span<const ForwardSegment> segments, LogitsMode mode, float* logits) {
  const ComputeContext ctx{&kernels, &pool_, workspace_.gemm_activations};
  const ModelConfig& c = config_;
  Workspace& ws = workspace_;
  const int n = int(tokens.size());
  const int64_t H = c.hidden_size;
  if (n == 0) return Status::Ok();
  // Validate everything before touching any KV.
  MLA_RETURN_IF_ERROR(CheckForwardCall(kv, c.num_hidden_layers, tokens, segments));
  const KvHostRows kv_rows = kv.HostRows();

  if (timings_ != nullptr) ++timings_->forward_calls;
  // Tensor parallelism: the workers compute the same call on their shards (RunTpWorker).
  if (tp_ != nullptr && tp_->rank() == 0) BroadcastForwardCall(kernels, kv, tokens, segments, mode);

  const KernelSet& k = *ctx.kernels;
  Embed(k, tokens);
  const double eps = c.rms_norm_eps;
  ForTokenRanges(n, [&](int begin, int end, int) {
    for (int t = begin; t < end; ++t) {
      k.rms_norm(ws.hidden.data() + t * H, weights_.layers[0].input_norm.data(), H, eps, ws.normed.data() + t * H);
    }
  });
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const bool last = l + 1 == c.num_hidden_layers;
    CaptureLayer(l, n);
    DecoderLayer(ctx, kv_rows, weights_.layers[size_t(l)], l, n, segments,
                 last ? nullptr : weights_.layers[size_t(l + 1)].input_norm.data());
  }
  CaptureLayer(c.num_hidden_layers, n);

  // Final norm (every token: all_hidden_rows), then lm_head for the rows whose logits are wanted.
  const int num_out = NormOutputRows(k, weights_.final_norm.data(), n, segments, mode);
  PhaseClock clock(timings_);
  if (tp_ != nullptr) {
    ShardedLogits(ctx, num_out, logits);  // only rank 0 receives them
  } else {
    MatMul(ctx, ws.last_hidden.data(), num_out, weights_.lm_head, logits);
  }
  clock.Add(&ForwardTimings::lm_head_ns);
  return Status::Ok();
}

}  // namespace mlaserve
