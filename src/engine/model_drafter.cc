#include "engine/model_drafter.h"

#include <algorithm>

#include "core/check.h"

namespace mlaserve {

ModelDrafter::ModelDrafter(DraftModel& draft, int max_positions, int max_context, int num_steps)
    : draft_(draft),
      max_context_(max_context),
      num_steps_(num_steps),
      target_width_(draft.target_width()),
      hidden_size_(draft.hidden_size()),
      tokens_(size_t(max_positions)),
      inputs_(size_t(max_positions) * size_t(std::max(target_width_, hidden_size_))) {
  MLA_CHECK(num_steps >= 1 && max_positions >= 1);
}

int ModelDrafter::Propose(const Request& r, std::span<TokenId> draft) {
  const size_t count = std::min(draft.size(), r.next_drafts.size());
  std::copy_n(r.next_drafts.begin(), count, draft.begin());
  return int(count);
}

Status ModelDrafter::Run(int n, bool from_target) {
  const size_t rows = size_t(std::count_if(drafting_.begin(), drafting_.end(), [](Request* r) { return r != nullptr; }));
  if (drafts_.size() < rows) {  // grows to the most sequences one step holds
    drafts_.resize(rows);
    out_hidden_.resize(rows * size_t(hidden_size_));
  }
  const int64_t width = from_target ? target_width_ : hidden_size_;
  MLA_RETURN_IF_ERROR(draft_.Forward(std::span(tokens_).first(size_t(n)),
                                     std::span(inputs_).first(size_t(n) * size_t(width)), from_target, segments_,
                                     drafts_, out_hidden_));
  size_t row = 0;
  for (Request* r : drafting_) {
    if (r != nullptr) r->next_drafts.push_back(drafts_[row++]);
  }
  return Status::Ok();
}

Status ModelDrafter::Observe(const BatchPlan& plan, std::span<Request* const> requests,
                             std::span<const float> target_rows) {
  const int64_t W = target_width_;
  for (Request* r : requests) r->next_drafts.clear();  // (an error leaves no drafts at all)
  if (target_rows.size() != size_t(plan.num_tokens()) * size_t(W)) {
    return Status::Error("the runner returned no target rows for the draft model");
  }
  // The extend: every position the step made final, paired with the token that follows it.
  segments_.clear();
  drafting_.clear();
  int n = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    Request& r = *requests[i];
    const PlannedSequence& seq = plan.sequences[i];
    // (A request that finished in the step still holds its KV here: the engine releases it after.)
    const int final_rows = r.kv->num_tokens();
    const int begin = seq.num_computed_tokens;
    const int end = std::min({begin + seq.num_new_tokens, final_rows, int(r.tokens.size()) - 1});
    if (end <= begin) continue;
    std::copy(r.tokens.begin() + begin + 1, r.tokens.begin() + end + 1, tokens_.begin() + n);
    std::copy_n(target_rows.data() + int64_t(seq.first_token) * W, int64_t(end - begin) * W,
                inputs_.data() + int64_t(n) * W);
    // (A request whose drafting is paused gets none: the extend alone keeps its draft rows, and
    // it needs no output row.)
    const bool drafts = r.finish_reason == FinishReason::kNone && r.decoding() && end == final_rows &&
                        r.draft_pause == 0 && r.draft_limit > 0;
    segments_.push_back({.pages = r.kv->pages(), .num_computed_tokens = begin, .num_tokens = end - begin,
                         .no_logits = !drafts});
    drafting_.push_back(drafts ? &r : nullptr);
    n += end - begin;
  }
  if (n == 0) return Status::Ok();
  const Status drafted = Extend(n);
  if (!drafted.ok()) {
    for (Request* r : requests) r->next_drafts.clear();  // (no part of a chain either)
  }
  return drafted;
}

Status ModelDrafter::Extend(int n) {
  const int64_t H = hidden_size_;
  MLA_RETURN_IF_ERROR(Run(n, /*from_target=*/true));

  // The chain: draft k + 1 from the draft model's own output row and draft k, one position further.
  for (int step = 1; step < num_steps_; ++step) {
    size_t kept = 0;
    for (size_t s = 0, row = 0; s < segments_.size(); ++s) {
      Request* r = drafting_[s];
      if (r == nullptr) continue;
      const size_t r_row = row++;  // its output row of the last forward
      if (step >= r->draft_limit) continue;  // as many as the request may verify
      const int position = r->kv->num_tokens() + step - 1;
      if (position + 1 > max_context_) continue;
      if (position >= r->kv->reserved_tokens() && !r->kv->Reserve(step).ok()) continue;  // no free page: stop
      tokens_[kept] = r->next_drafts.back();
      std::copy_n(out_hidden_.data() + int64_t(r_row) * H, H, inputs_.data() + int64_t(kept) * H);
      segments_[kept] = {.pages = r->kv->pages(), .num_computed_tokens = position, .num_tokens = 1, .no_logits = false};
      drafting_[kept] = r;
      ++kept;
    }
    segments_.resize(kept);
    drafting_.resize(kept);
    if (kept == 0) break;
    MLA_RETURN_IF_ERROR(Run(int(kept), /*from_target=*/false));
  }
  return Status::Ok();
}

}  // namespace mlaserve
