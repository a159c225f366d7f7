#include "engine/mtp_drafter.h"

#include <algorithm>

#include "core/check.h"

namespace mlaserve {

MtpDrafter::MtpDrafter(Model& model, const KernelSet& kernels, KvStorage& mtp_kv, int num_steps)
    : model_(model),
      kernels_(kernels),
      mtp_kv_(mtp_kv),
      num_steps_(num_steps),
      hidden_size_(model.config().hidden_size),
      vocab_size_(model.config().vocab_size),
      tokens_(size_t(model.max_batch_tokens())),
      prev_hidden_(size_t(model.max_batch_tokens()) * size_t(hidden_size_)) {
  MLA_CHECK(model.has_mtp() && num_steps >= 1);
}

int MtpDrafter::Propose(const Request& r, std::span<TokenId> draft) {
  const size_t count = std::min(draft.size(), r.next_drafts.size());
  std::copy_n(r.next_drafts.begin(), count, draft.begin());
  return int(count);
}

Status MtpDrafter::RunMtp(int n) {
  // A logits row (and an output hidden row) per drafting segment, in segment order.
  const size_t rows = size_t(std::count_if(drafting_.begin(), drafting_.end(), [](Request* r) { return r != nullptr; }));
  if (logits_.size() < rows * size_t(vocab_size_)) {  // grows to the most sequences one step holds
    logits_.resize(rows * size_t(vocab_size_));
    out_hidden_.resize(rows * size_t(hidden_size_));
  }
  MLA_RETURN_IF_ERROR(model_.ForwardMtp(kernels_, mtp_kv_, std::span(tokens_).first(size_t(n)),
                                        std::span(prev_hidden_).first(size_t(n) * size_t(hidden_size_)), segments_,
                                        LogitsMode::kLastPerSegment, logits_.data()));
  const std::span<const float> normed = model_.last_hidden_rows(int(rows));
  std::copy(normed.begin(), normed.end(), out_hidden_.begin());
  return Status::Ok();
}

void MtpDrafter::TakeDrafts() {
  size_t row = 0;
  for (Request* r : drafting_) {
    if (r == nullptr) continue;
    const float* logits = logits_.data() + row++ * size_t(vocab_size_);
    r->next_drafts.push_back(TokenId(std::max_element(logits, logits + vocab_size_) - logits));
  }
}

Status MtpDrafter::Observe(const BatchPlan& plan, std::span<Request* const> requests,
                           std::span<const float> hidden_states) {
  const int64_t H = hidden_size_;
  if (hidden_states.size() != size_t(plan.num_tokens()) * size_t(H)) {
    return Status::Error("the runner returned no hidden states for the MTP drafter");
  }
  // The extend: every position the step made final, paired with the token that follows it.
  segments_.clear();
  drafting_.clear();
  int n = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    Request& r = *requests[i];
    const PlannedSequence& seq = plan.sequences[i];
    r.next_drafts.clear();
    // (A request that finished in the step still holds its KV here: the engine releases it after.)
    const int final_rows = r.kv->num_tokens();
    const int begin = seq.num_computed_tokens;
    const int end = std::min({begin + seq.num_new_tokens, final_rows, int(r.tokens.size()) - 1});
    if (end <= begin) continue;
    std::copy(r.tokens.begin() + begin + 1, r.tokens.begin() + end + 1, tokens_.begin() + n);
    std::copy_n(hidden_states.data() + int64_t(seq.first_token) * H, int64_t(end - begin) * H,
                prev_hidden_.data() + int64_t(n) * H);
    // (A request whose drafting is paused gets none: the extend alone keeps its MTP rows, and
    // it needs no logits row.)
    const bool drafts = r.finish_reason == FinishReason::kNone && r.decoding() && end == final_rows &&
                        r.draft_pause == 0 && r.draft_limit > 0;
    segments_.push_back({.pages = r.kv->pages(), .num_computed_tokens = begin, .num_tokens = end - begin,
                         .no_logits = !drafts});
    drafting_.push_back(drafts ? &r : nullptr);
    n += end - begin;
  }
  if (n == 0) return Status::Ok();
  MLA_RETURN_IF_ERROR(RunMtp(n));
  TakeDrafts();

  // The chain: draft k + 1 from the MTP's own hidden state and draft k, one position further.
  for (int step = 1; step < num_steps_; ++step) {
    size_t kept = 0;
    for (size_t s = 0, row = 0; s < segments_.size(); ++s) {
      Request* r = drafting_[s];
      if (r == nullptr) continue;
      const size_t r_row = row++;  // its logits and output hidden row of the last forward
      if (step >= r->draft_limit) continue;  // as many as the request may verify
      const int position = r->kv->num_tokens() + step - 1;
      if (position + 1 > model_.max_context()) continue;
      if (position >= r->kv->reserved_tokens() && !r->kv->Reserve(step).ok()) continue;  // no free page: stop
      tokens_[kept] = r->next_drafts.back();
      std::copy_n(out_hidden_.data() + int64_t(r_row) * H, H, prev_hidden_.data() + int64_t(kept) * H);
      segments_[kept] = {.pages = r->kv->pages(), .num_computed_tokens = position, .num_tokens = 1, .no_logits = false};
      drafting_[kept] = r;
      ++kept;
    }
    segments_.resize(kept);
    drafting_.resize(kept);
    if (kept == 0) break;
    MLA_RETURN_IF_ERROR(RunMtp(int(kept)));
    TakeDrafts();
  }
  return Status::Ok();
}

}  // namespace mlaserve
