// Draft tokens for speculative decoding: a Drafter proposes the tokens it guesses follow a
// request's history; the engine verifies them all in one forward pass (docs/architecture.md,
// "Speculative decoding"). This file owns the interface and the one drafter that needs no
// weights: prompt lookup (vLLM's "ngram" method), which copies what followed the most recent
// earlier occurrence of the history's last few tokens. The drafter that runs a draft model (the
// checkpoint's MTP layer, an EAGLE-3 checkpoint) is engine/model_drafter.h.
// Threads: the engine thread only (a drafter may keep state between calls).
#pragma once

#include <span>

#include "core/status.h"
#include "core/types.h"
#include "engine/batch_plan.h"
#include "engine/request.h"

namespace mlaserve {

// Which of the target's rows a drafter reads after each step.
enum class DrafterInput {
  kNone,
  kFinalHidden,     // every token's final-normed hidden state (BatchPlan::return_hidden_states)
  kCapturedLayers,  // every token's captured layer rows (BatchPlan::capture_hidden_states)
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // While scheduling a decoding request: writes at most draft.size() tokens guessed to follow
  // r.tokens (its prompt and output so far) to the front of `draft`, a buffer the caller owns;
  // returns how many (0: no guess). Does not allocate and does not keep the views.
  [[nodiscard]] virtual int Propose(const Request& r, std::span<TokenId> draft) = 0;

  // A drafter that reads the target's hidden states (a draft model: MTP, EAGLE-3) says which
  // rows; the engine then asks the runner for them every step and calls Observe after it.
  virtual DrafterInput input() const { return DrafterInput::kNone; }
  // After a step's outputs were appended and its rejected drafts dropped, so each planned
  // request's kv->num_tokens() counts its final rows: the step's plan, its requests in plan
  // order (finished ones still hold their KV: the engine releases it after), and the target's
  // rows input() names for every planned token, [plan.num_tokens(), width]. Views valid for the
  // call. An error means no drafts this step; the engine goes on without them.
  virtual Status Observe(const BatchPlan& plan, std::span<Request* const> requests,
                         std::span<const float> target_rows) {
    (void)plan, (void)requests, (void)target_rows;
    return Status::Ok();
  }
};

// Prompt lookup: for n from max_ngram down to min_ngram, finds the most recent earlier
// occurrence of the last n tokens in the history and proposes the tokens that followed it.
class NgramDrafter final : public Drafter {
 public:
  // How far back an n-gram is looked for, in tokens (bounds the per-step scan).
  static constexpr int kLookbackTokens = 4096;
  // 1 <= min_ngram <= max_ngram (checked).
  explicit NgramDrafter(int min_ngram = 1, int max_ngram = 3);
  [[nodiscard]] int Propose(const Request& r, std::span<TokenId> draft) override { return Lookup(r.tokens, draft); }
  // The lookup in any history `tokens` (Propose's contract).
  [[nodiscard]] int Lookup(std::span<const TokenId> tokens, std::span<TokenId> draft) const;

 private:
  int min_ngram_;
  int max_ngram_;
};

}  // namespace mlaserve
