#include "sim/simulated_runner.h"

#include <string>

namespace mlaserve {

SimulatedRunner::SimulatedRunner(const StepCostModel& cost, const HardwareProfile& profile, VirtualClock& clock,
                                 const ModelRunnerInfo& info)
    : cost_(cost), profile_(profile), clock_(clock), info_(info) {
  info_.vocab_size = kSimulatedVocab;
  info_.eos_token_id = -1;
  info_.captured_width = 0;
}

void SimulatedRunner::ReserveLogitsRows(int max_logits_rows) {
  logits_.assign(size_t(max_logits_rows) * size_t(kSimulatedVocab), 0.0f);
}

Result<ModelRunnerOutput> SimulatedRunner::Execute(const BatchPlan& plan) {
  if (size_t(plan.num_logits_rows) * size_t(kSimulatedVocab) > logits_.size()) {
    return Status::Error("the plan asks for " + std::to_string(plan.num_logits_rows) +
                         " logits rows, more than the runner reserved");
  }
  const StepTime t = cost_.Time(cost_.Work(plan), profile_);
  clock_.AdvanceSeconds(t.total_s);
  ++totals_.steps;
  totals_.tokens += plan.num_tokens();
  totals_.time.weights_s += t.weights_s;
  totals_.time.linear_s += t.linear_s;
  totals_.time.kv_s += t.kv_s;
  totals_.time.attention_s += t.attention_s;
  totals_.time.comm_s += t.comm_s;
  totals_.time.overhead_s += t.overhead_s;
  totals_.time.total_s += t.total_s;
  return ModelRunnerOutput{.logits = std::span<const float>(logits_).first(size_t(plan.num_logits_rows) *
                                                                           size_t(kSimulatedVocab))};
}

}  // namespace mlaserve
