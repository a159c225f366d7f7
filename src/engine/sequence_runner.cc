#include "engine/sequence_runner.h"

#include <algorithm>

namespace mlaserve {

SequenceRunner::SequenceRunner(Model& model, const KernelSet& kernels, std::unique_ptr<PageAllocator> allocator,
                               std::unique_ptr<HostKvStorage> storage)
    : model_(model),
      kernels_(kernels),
      allocator_(std::move(allocator)),
      storage_(std::move(storage)),
      kv_(std::make_unique<SequenceKv>(*allocator_, model.max_context())),
      chunk_logits_(size_t(model.max_batch_tokens()) * size_t(model.config().vocab_size)),
      last_logits_(size_t(model.config().vocab_size)) {}

Result<std::unique_ptr<SequenceRunner>> SequenceRunner::Create(Model& model, const KernelSet& kernels,
                                                               const SequenceRunnerOptions& o) {
  const ModelConfig& c = model.config();
  const int64_t tokens = o.pool_tokens > 0 ? o.pool_tokens : model.max_context();
  const int64_t pages = (tokens + o.page_size - 1) / std::max(1, o.page_size);
  auto storage = HostKvStorage::Create(KvStorageShape{.format = o.kv_format,
                                                      .num_layers = c.num_hidden_layers,
                                                      .latent_dim = c.kv_lora_rank,
                                                      .rope_dim = c.qk_rope_head_dim,
                                                      .page_size = o.page_size,
                                                      .num_pages = pages});
  if (!storage.ok()) return storage.status();
  if (!o.kv_tensor_scales.empty()) MLA_RETURN_IF_ERROR((*storage)->SetTensorScales(o.kv_tensor_scales));
  auto allocator = PageAllocator::Create(o.page_size, pages);
  if (!allocator.ok()) return allocator.status();
  return std::unique_ptr<SequenceRunner>(
      new SequenceRunner(model, kernels, std::move(allocator).value(), std::move(storage).value()));
}

Status SequenceRunner::Append(std::span<const TokenId> tokens, LogitsSink* sink) {
  const int vocab = model_.config().vocab_size;
  MLA_RETURN_IF_ERROR(kv_->Reserve(int(tokens.size())));
  const LogitsMode mode = sink != nullptr ? LogitsMode::kAllTokens : LogitsMode::kLastPerSegment;
  for (size_t begin = 0; begin < tokens.size();) {
    const int count = int(std::min<size_t>(size_t(model_.max_batch_tokens()), tokens.size() - begin));
    const ForwardSegment segment{.pages = kv_->pages(), .num_computed_tokens = kv_->num_tokens(), .num_tokens = count};
    MLA_RETURN_IF_ERROR(model_.Forward(kernels_, *storage_, tokens.subspan(begin, size_t(count)),
                                       std::span(&segment, 1), mode, chunk_logits_.data()));
    kv_->MarkComputed(count);
    if (sink != nullptr) (*sink)(int(begin), count, chunk_logits_.data());
    const float* last = chunk_logits_.data() +
                        (mode == LogitsMode::kAllTokens ? size_t(count - 1) * vocab : 0);
    std::copy(last, last + vocab, last_logits_.begin());
    begin += size_t(count);
  }
  return Status::Ok();
}

}  // namespace mlaserve
