// Drafts from a draft model (model/draft_model.h): the checkpoint's MTP layer (NEXTN) or an
// EAGLE-3 draft checkpoint (EAGLE3); docs/architecture.md, "Speculative decoding".
// After every step (Observe) it runs the draft model over the positions the step made final,
// pairing each position's target row (the target's hidden state the draft model reads) with the
// token that follows it, which fills the draft model's cache and gives the first draft; then it
// chains num_steps - 1 more one-token steps, each fed the previous step's output row and draft.
// The drafts wait in Request::next_drafts for the next Schedule (Propose). One batched forward
// per chain step serves every request of the step.
//
// Cache: the draft model's rows live at the same page ids as the engine's storage, so a page the
// radix cache shares or the scheduler frees carries them along and no second allocator exists.
// Rows of chained drafts (past the final rows) are provisional: the next Observe overwrites them
// with rows from the target's hidden states. Not exact, only draft quality: a prefix the radix
// cache served brings the rows its first owner wrote (whose last row paired that owner's next
// token). A request that finishes in a step is observed too (the engine releases its KV after
// Observe), so the full pages it hands to the radix cache carry final rows.
#pragma once

#include <vector>

#include "engine/drafter.h"
#include "model/draft_model.h"

namespace mlaserve {

class ModelDrafter final : public Drafter {
 public:
  // draft: borrowed, must outlive the drafter. max_positions: the most positions one step makes
  // final (the model's max_batch_tokens); max_context: the target's context length.
  // num_steps: drafts per request per step (SGLang's --speculative-num-steps).
  ModelDrafter(DraftModel& draft, int max_positions, int max_context, int num_steps);

  [[nodiscard]] int Propose(const Request& r, std::span<TokenId> draft) override;
  DrafterInput input() const override {
    return draft_.target_rows() == TargetRows::kFinalHidden ? DrafterInput::kFinalHidden
                                                            : DrafterInput::kCapturedLayers;
  }
  // May reserve pages in a request's SequenceKv for its provisional rows (never evicting; the
  // request owns them; the next step's verify uses or truncates them, or Scheduler::Draft frees
  // them when it grants no drafts).
  Status Observe(const BatchPlan& plan, std::span<Request* const> requests,
                 std::span<const float> target_rows) override;

 private:
  // The draft forward over the n positions Observe gathered in segments_, then the chain.
  Status Extend(int n);
  // One batched draft forward over inputs_[0, n) and segments_; appends each drafting segment's
  // token to its request's next_drafts and keeps its output row in out_hidden_.
  Status Run(int n, bool from_target);

  DraftModel& draft_;
  int max_context_;
  int num_steps_;
  int64_t target_width_;
  int64_t hidden_size_;
  // Reused buffers (grown to the largest step seen; no allocation once they have).
  std::vector<TokenId> tokens_;           // [n] the token after each position
  std::vector<float> inputs_;             // [n, target_width] the row at each position
  std::vector<ForwardSegment> segments_;  // one per request in the forward
  std::vector<Request*> drafting_;        // [segments_] the request each segment drafts for (or null)
  std::vector<TokenId> drafts_;           // [drafting segments]
  std::vector<float> out_hidden_;         // [drafting segments, hidden_size]
};

}  // namespace mlaserve
