#include "model/mtp_draft.h"

#include <algorithm>

#include "core/check.h"

namespace mlaserve {

MtpDraft::MtpDraft(Model& model, const KernelSet& kernels, KvStorage& mtp_kv)
    : model_(model), kernels_(kernels), mtp_kv_(mtp_kv) {
  MLA_CHECK(model.has_mtp());
}

Status MtpDraft::Forward(std::span<const TokenId> tokens, std::span<const float> inputs, bool from_target,
                         std::span<const ForwardSegment> segments, std::span<TokenId> drafts,
                         std::span<float> out_hidden) {
  (void)from_target;
  const size_t vocab = size_t(model_.config().vocab_size);
  const size_t rows = size_t(std::count_if(segments.begin(), segments.end(), [](const ForwardSegment& s) { return !s.no_logits; }));
  MLA_CHECK(drafts.size() >= rows && out_hidden.size() >= rows * size_t(hidden_size()));
  if (logits_.size() < rows * vocab) logits_.resize(rows * vocab);
  MLA_RETURN_IF_ERROR(
      model_.ForwardMtp(kernels_, mtp_kv_, tokens, inputs, segments, LogitsMode::kLastPerSegment, logits_.data()));
  const std::span<const float> normed = model_.last_hidden_rows(int(rows));
  std::copy(normed.begin(), normed.end(), out_hidden.begin());
  for (size_t row = 0; row < rows; ++row) {
    const float* logits = logits_.data() + row * vocab;
    drafts[row] = TokenId(std::max_element(logits, logits + vocab) - logits);
  }
  return Status::Ok();
}

}  // namespace mlaserve
