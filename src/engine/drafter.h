// Draft tokens for speculative decoding: a Drafter proposes the tokens it guesses follow a
// request's history; the engine verifies them all in one forward pass (docs/architecture.md,
// "Speculative decoding"). This file owns the interface and the one drafter that needs no
// weights: prompt lookup (vLLM's "ngram" method), which copies what followed the most recent
// earlier occurrence of the history's last few tokens.
// Threads: the engine thread only (a drafter may keep state between calls).
#pragma once

#include <span>

#include "core/types.h"

namespace mlaserve {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Writes at most draft.size() tokens guessed to follow `tokens` (a request's prompt and
  // output so far) to the front of `draft`, a buffer the caller owns; returns how many
  // (0: no guess). Does not allocate and does not keep the views.
  [[nodiscard]] virtual int Propose(std::span<const TokenId> tokens, std::span<TokenId> draft) = 0;
};

// Prompt lookup: for n from max_ngram down to min_ngram, finds the most recent earlier
// occurrence of the last n tokens in the history and proposes the tokens that followed it.
class NgramDrafter final : public Drafter {
 public:
  // How far back an n-gram is looked for, in tokens (bounds the per-step scan).
  static constexpr int kLookbackTokens = 4096;
  // 1 <= min_ngram <= max_ngram (checked).
  explicit NgramDrafter(int min_ngram = 1, int max_ngram = 3);
  [[nodiscard]] int Propose(std::span<const TokenId> tokens, std::span<TokenId> draft) override;

 private:
  int min_ngram_;
  int max_ngram_;
};

}  // namespace mlaserve
