// Runs one sequence through a Model without the batching engine: appends tokens (chunked to the
// model's max_batch_tokens) and keeps the last token's logits. Used by generate, score, bench,
// kv-eval and the reference tests. Owns a KV cache sized for one full-context sequence in the
// chosen format (its page ids, a PageAllocator, and their bytes, a HostKvStorage), and its logits
// buffers, all allocated once.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/function_ref.h"
#include "kvcache/kv_storage.h"
#include "kvcache/page_allocator.h"
#include "kvcache/sequence_kv.h"
#include "model/model.h"

namespace mlaserve {

struct SequenceRunnerOptions {
  KvFormat kv_format = KvFormat::kBF16;
  std::vector<float> kv_tensor_scales;  // per layer; empty: 1.0 (or the checkpoint's)
  int page_size = 16;
  int64_t pool_tokens = 0;  // KV pool capacity; 0: one full context
};

class SequenceRunner {
 public:
  // model and kernels must outlive the runner.
  static Result<std::unique_ptr<SequenceRunner>> Create(Model& model, const KernelSet& kernels,
                                                        const SequenceRunnerOptions& options);

  // Called with (index of the chunk's first token in `tokens`, count, logits [count, vocab]).
  using LogitsSink = FunctionRef<void(int, int, const float*)>;

  // Appends `tokens` at the end of the sequence. With a sink, every token's logits are passed
  // to it chunk by chunk; last_logits() holds the final token's either way.
  Status Append(std::span<const TokenId> tokens, LogitsSink* sink = nullptr);

  std::span<const float> last_logits() const { return last_logits_; }
  int num_tokens() const { return kv_->num_tokens(); }
  void Reset() { kv_->Release(); }
  const SequenceKv& kv() const { return *kv_; }
  const PageAllocator& allocator() const { return *allocator_; }
  HostKvStorage& storage() { return *storage_; }

 private:
  SequenceRunner(Model& model, const KernelSet& kernels, std::unique_ptr<PageAllocator> allocator,
                 std::unique_ptr<HostKvStorage> storage);

  Model& model_;
  const KernelSet& kernels_;
  std::unique_ptr<PageAllocator> allocator_;
  std::unique_ptr<HostKvStorage> storage_;
  std::unique_ptr<SequenceKv> kv_;
  std::vector<float> chunk_logits_;  // [max_batch_tokens, vocab]
  std::vector<float> last_logits_;   // [vocab]
};

}  // namespace mlaserve
