// Speculative step tuning (EngineOptions::tune_draft_steps; --enable-speculative-step-tuning):
// picks the engine-wide most drafts per verify step, 0..k, by measured decode throughput
// (docs/architecture.md, "Speculative step tuning"). Acceptance alone does not decide whether
// another draft pays: each one costs a draft-model step and a verify token's attention and
// experts, which depends on the model, the context and the batch. So the tuner times them: it
// runs `window_steps` decode-only steps at each cap from k down to 0 (0: plain decoding, the
// draft model not run at all), keeps the cap with the most tokens per second, holds it for
// `hold_steps` decode-only steps, then measures again. Outputs do not depend on it (every
// draft is verified exactly); only speed does.
// Threads: the engine thread only. No allocation after construction.
#pragma once

#include <cstdint>
#include <vector>

namespace mlaserve {

class DraftStepTuner {
 public:
  // max_drafts = k >= 1; window_steps, hold_steps >= 1.
  DraftStepTuner(int max_drafts, int window_steps, int hold_steps);

  // The most drafts a request may verify next step (0..k).
  int cap() const { return cap_; }
  // After a step whose planned requests were all decoding: the tokens it appended and how long
  // it took. Returns true when a measurement round just ended (rates() then holds its figures).
  bool Record(int64_t tokens, int64_t elapsed_ns);
  // The last round's decode tokens per second at cap 0..k ([c]; 0: not measured).
  const std::vector<double>& rates() const { return rates_; }

 private:
  int max_drafts_;
  int window_steps_;
  int hold_steps_;
  int cap_;
  bool measuring_ = true;
  int steps_ = 0;  // in the current window or hold
  int64_t tokens_ = 0;
  int64_t elapsed_ns_ = 0;
  std::vector<double> rates_;  // [k + 1]
};

}  // namespace mlaserve
