#include "engine/draft_step_tuner.h"

#include <algorithm>

#include "core/check.h"

namespace mlaserve {

DraftStepTuner::DraftStepTuner(int max_drafts, int window_steps, int hold_steps)
    : max_drafts_(max_drafts),
      window_steps_(window_steps),
      hold_steps_(hold_steps),
      cap_(max_drafts),
      rates_(size_t(max_drafts) + 1, 0.0) {
  MLA_CHECK(max_drafts >= 1 && window_steps >= 1 && hold_steps >= 1);
}

bool DraftStepTuner::Record(int64_t tokens, int64_t elapsed_ns) {
  ++steps_;
  if (!measuring_) {
    if (steps_ < hold_steps_) return false;
    measuring_ = true;  // measure again: k first
    cap_ = max_drafts_;
    steps_ = 0;
    tokens_ = elapsed_ns_ = 0;
    return false;
  }
  tokens_ += tokens;
  elapsed_ns_ += elapsed_ns;
  if (steps_ < window_steps_) return false;
  rates_[size_t(cap_)] = elapsed_ns_ > 0 ? double(tokens_) * 1e9 / double(elapsed_ns_) : 0.0;
  steps_ = 0;
  tokens_ = elapsed_ns_ = 0;
  if (cap_ > 0) {
    --cap_;
    return false;
  }
  // Every cap measured: hold the fastest (the fewer drafts on a tie).
  cap_ = int(std::max_element(rates_.begin(), rates_.end()) - rates_.begin());
  measuring_ = false;
  return true;
}

}  // namespace mlaserve
