// An MLA model (DeepSeek-V2/V3 family) loaded from a checkpoint directory, and its forward pass.
// The model only describes the math: callers own the KV of each sequence and say which
// positions to compute; Forward never allocates.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "core/status.h"
#include "core/types.h"
#include "kernels/ops.h"
#include "kvcache/sequence_kv.h"
#include "model/config.h"
#include "model/rope.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "model/workspace.h"

namespace mlaserve {

struct ModelOptions {
  int max_batch_tokens = 512;  // tokens per Forward call (longer prompts are chunked)
  int max_context = 0;         // 0: min(max_position_embeddings, 4096)
  int num_threads = 0;         // 0: ThreadPool::DefaultThreadCount()
};

// One sequence's share of a Forward call: its tokens occupy positions
// [kv->num_tokens(), kv->num_tokens() + num_tokens) and are appended to *kv, whose pages must
// already cover them (SequenceKv::Reserve). Every segment's pool must have the model's shape.
struct ForwardSegment {
  SequenceKv* kv;
  int num_tokens;
  bool all_logits = false;  // logits for every token of this segment, not just its last
};

enum class LogitsMode { kLastPerSegment, kAllTokens };

class Model {
 public:
  static Result<std::unique_ptr<Model>> Load(const std::string& model_dir,
                                             const ModelOptions& options);

  const ModelConfig& config() const { return config_; }
  int max_context() const { return workspace_.max_context; }
  int max_batch_tokens() const { return workspace_.max_tokens; }
  ThreadPool& pool() { return pool_; }
  const ModelWeights& weights() const { return weights_; }
  size_t weight_bytes() const { return checkpoint_->total_tensor_bytes(); }
  const Checkpoint& checkpoint() const { return *checkpoint_; }

  // tokens: the segments' tokens concatenated (at most max_batch_tokens). logits receives, in
  // segment order, one row per segment (kLastPerSegment) or per token (kAllTokens); a segment
  // with all_logits gets a row for each of its tokens either way.
  // Errors (a token id out of range, a context overflow) leave every KV unchanged.
  // kernels: the table to compute with (DefaultKernels() unless a test compares tables).
  Status Forward(const KernelSet& kernels, std::span<const TokenId> tokens,
                 std::span<const ForwardSegment> segments, LogitsMode mode, float* logits);

 private:
  Model(ModelConfig config, std::unique_ptr<Checkpoint> checkpoint, ModelWeights weights,
        const ModelOptions& options, int max_context, int num_threads);

  void Attention(const ComputeContext& ctx, int layer, int num_tokens,
                 std::span<const ForwardSegment> segments);
  void DenseMlp(const ComputeContext& ctx, const MlpWeights& w, int num_tokens, float* out);
  void Moe(const ComputeContext& ctx, const MoeWeights& w, int num_tokens);
  void RouteToken(const MoeWeights& w, const float* logits, float* scratch, int32_t* ids,
                  float* weights) const;

  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  ModelWeights weights_;
  ThreadPool pool_;
  RopeTables rope_;
  Workspace workspace_;
  std::vector<int32_t> token_positions_;  // [max_batch_tokens] position of each token
  std::vector<int32_t> token_segments_;   // [max_batch_tokens] segment of each token
};

}  // namespace mlaserve
