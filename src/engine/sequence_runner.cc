#include "engine/sequence_runner.h"

#include <algorithm>

namespace mlaserve {

SequenceRunner::SequenceRunner(Model& model, const KernelSet& kernels)
    : model_(model),
      kernels_(kernels),
      kv_(model.NewSequenceKv()),
      chunk_logits_(size_t(model.max_batch_tokens()) * size_t(model.config().vocab_size)),
      last_logits_(size_t(model.config().vocab_size)) {}

Status SequenceRunner::Append(std::span<const TokenId> tokens, LogitsSink* sink) {
  const int vocab = model_.config().vocab_size;
  if (kv_->num_tokens() + int64_t(tokens.size()) > kv_->capacity_tokens()) {
    return Status::Error("sequence of " + std::to_string(kv_->num_tokens() + tokens.size()) +
                         " tokens exceeds the context length " +
                         std::to_string(kv_->capacity_tokens()));
  }
  const LogitsMode mode = sink != nullptr ? LogitsMode::kAllTokens : LogitsMode::kLastPerSegment;
  for (size_t begin = 0; begin < tokens.size();) {
    const int count = int(std::min<size_t>(size_t(model_.max_batch_tokens()), tokens.size() - begin));
    const ForwardSegment segment{kv_.get(), count};
    MLA_RETURN_IF_ERROR(model_.Forward(kernels_, tokens.subspan(begin, size_t(count)),
                                       std::span(&segment, 1), mode, chunk_logits_.data()));
    if (sink != nullptr) (*sink)(int(begin), count, chunk_logits_.data());
    const float* last = chunk_logits_.data() +
                        (mode == LogitsMode::kAllTokens ? size_t(count - 1) * vocab : 0);
    std::copy(last, last + vocab, last_logits_.begin());
    begin += size_t(count);
  }
  return Status::Ok();
}

}  // namespace mlaserve
