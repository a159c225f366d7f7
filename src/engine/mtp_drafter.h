// NEXTN drafts: DeepSeek-V3's multi-token-prediction layer as the draft model
// (docs/architecture.md, "MTP drafts"). After every step (Observe) it runs the MTP layer over
// the positions the step made final, pairing each position's target hidden state with the
// token that follows it, which fills the MTP layer's own latent cache and gives the first draft;
// then it chains num_steps - 1 more one-token MTP steps, each fed the previous step's output
// hidden state and draft. The drafts wait in Request::next_drafts for the next Schedule
// (Propose). One batched MTP forward per chain step serves every request of the step.
//
// Cache: the MTP layer's rows live in their own one-layer KvStorage indexed by the same page ids
// as the engine's storage, so a page the radix cache shares or the scheduler frees carries its
// MTP rows along and no second allocator exists. Rows of chained drafts (past the final rows)
// are provisional: the next Observe overwrites them with rows from the target's hidden states.
// Not exact, only draft quality: a prefix the radix cache served brings the MTP rows its first
// owner wrote (whose last row paired that owner's next token). A request that finishes in a step
// is observed too (the engine releases its KV after Observe), so the full pages it hands to the
// radix cache carry final MTP rows.
#pragma once

#include <vector>

#include "engine/drafter.h"
#include "kernels/kernels.h"
#include "kvcache/kv_storage.h"
#include "model/model.h"

namespace mlaserve {

class MtpDrafter final : public Drafter {
 public:
  // model must have its MTP layer (Model::has_mtp); model, kernels and mtp_kv (one layer, the
  // engine storage's page_size and num_pages) are borrowed and must outlive the drafter.
  // num_steps: drafts per request per step (SGLang's --speculative-num-steps).
  MtpDrafter(Model& model, const KernelSet& kernels, KvStorage& mtp_kv, int num_steps);

  [[nodiscard]] int Propose(const Request& r, std::span<TokenId> draft) override;
  bool wants_hidden_states() const override { return true; }
  // May reserve pages in a request's SequenceKv for its provisional rows (never evicting; the
  // request owns them; the next step's verify uses or truncates them, or Scheduler::Draft frees
  // them when it grants no drafts).
  Status Observe(const BatchPlan& plan, std::span<Request* const> requests,
                 std::span<const float> hidden_states) override;

 private:
  // One batched MTP forward over inputs_[0, n) and segments_; on success logits_ holds a row
  // per drafting segment (drafting_ not null; the others are no_logits) and out_hidden_ the
  // MTP's normed hidden state of each, in segment order.
  Status RunMtp(int n);
  // The argmax of each drafting segment's row, appended to its request's next_drafts.
  void TakeDrafts();

  Model& model_;
  const KernelSet& kernels_;
  KvStorage& mtp_kv_;
  int num_steps_;
  int64_t hidden_size_;
  int vocab_size_;
  // Reused buffers (grown to the largest step seen; no allocation once they have).
  std::vector<TokenId> tokens_;           // [n] the token after each position
  std::vector<float> prev_hidden_;        // [n, H] the hidden state at each position
  std::vector<ForwardSegment> segments_;  // one per request in the forward
  std::vector<Request*> drafting_;        // [segments_] the request each segment drafts for (or null)
  std::vector<float> logits_;             // [drafting segments, vocab]
  std::vector<float> out_hidden_;         // [drafting segments, H]
};

}  // namespace mlaserve
