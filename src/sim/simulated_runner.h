// A ModelRunner that computes nothing: it executes a BatchPlan by advancing a VirtualClock by
// the step's predicted time (sim/step_cost.h) and returns synthetic logits, all zeros, so the
// real output processor samples (greedy: token 0, never an end of sequence: the runner reports
// none) and the requests run to their max_new_tokens. The engine above it is the real one:
// scheduler, prefix cache, retraction, output processing and delivery all run as in the server.
// Ownership: borrows the cost model, the profile and the clock (all must outlive it); owns its
// logits buffer and the running totals of what it predicted.
#pragma once

#include <vector>

#include "engine/clock.h"
#include "engine/model_runner.h"
#include "sim/step_cost.h"

namespace mlaserve {

// Vocabulary of the synthetic logits: small, so sampling a row costs little; prompts are
// token ids below it.
inline constexpr int kSimulatedVocab = 1024;

class SimulatedRunner final : public ModelRunner {
 public:
  SimulatedRunner(const StepCostModel& cost, const HardwareProfile& profile, VirtualClock& clock,
                  const ModelRunnerInfo& info);

  const ModelRunnerInfo& info() const override { return info_; }
  void ReserveLogitsRows(int max_logits_rows) override;
  Result<ModelRunnerOutput> Execute(const BatchPlan& plan) override;

  // Sums over every Execute so far.
  struct Totals {
    int64_t steps = 0;
    int64_t tokens = 0;
    StepTime time;  // each field summed
  };
  const Totals& totals() const { return totals_; }

 private:
  const StepCostModel& cost_;
  const HardwareProfile& profile_;
  VirtualClock& clock_;
  ModelRunnerInfo info_;
  std::vector<float> logits_;  // [max_logits_rows, kSimulatedVocab], zeros
  Totals totals_;
};

}  // namespace mlaserve
