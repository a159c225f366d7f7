// Runs one sequence through a Model without the batching engine: appends tokens (chunked to the
// model's max_batch_tokens) and keeps the last token's logits. Used by generate, score, bench
// and the reference tests. Owns its KV and logits buffers, allocated once.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/function_ref.h"
#include "model/model.h"

namespace mlaserve {

class SequenceRunner {
 public:
  // model and kernels must outlive the runner.
  SequenceRunner(Model& model, const KernelSet& kernels);

  // Called with (index of the chunk's first token in `tokens`, count, logits [count, vocab]).
  using LogitsSink = FunctionRef<void(int, int, const float*)>;

  // Appends `tokens` at the end of the sequence. With a sink, every token's logits are passed
  // to it chunk by chunk; last_logits() holds the final token's either way.
  Status Append(std::span<const TokenId> tokens, LogitsSink* sink = nullptr);

  std::span<const float> last_logits() const { return last_logits_; }
  int num_tokens() const { return kv_->num_tokens(); }
  void Reset() { kv_->set_num_tokens(0); }

 private:
  Model& model_;
  const KernelSet& kernels_;
  std::unique_ptr<SequenceKv> kv_;
  std::vector<float> chunk_logits_;  // [max_batch_tokens, vocab]
  std::vector<float> last_logits_;   // [vocab]
};

}  // namespace mlaserve
