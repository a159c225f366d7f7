// Fits a hardware profile's efficiencies and overheads to measured steps (the `this-host`
// calibration, cli/calibrate_host.h): given the rates (bandwidth, arithmetic peaks) measured on
// the host and, per step, the work the cost model counts and the seconds the real engine took,
// finds the five numbers of the cost model (sim/step_cost.h) that predict the seconds best in
// relative error:
//   1 / e_memory (one efficiency for weights and KV reads), 1 / e_linear, 1 / e_attention,
//   step_overhead, per_logits_row.
// Both ways of combining a phase's memory and arithmetic time are fitted and the one with the
// smaller mean relative error is kept (`combine` of the result): with sum the model is linear in
// the five numbers; with max it is piecewise linear, and the fit alternates choosing each step's
// bound side with the current numbers and a least-squares solve on those sides. Each efficiency
// is clamped to (0, 1.5] and the overheads to >= 0; a number no step depends on keeps its start.
#pragma once

#include <span>

#include "sim/hardware_profile.h"
#include "sim/step_cost.h"

namespace mlaserve {

struct MeasuredStep {
  StepWork work;
  double seconds = 0;
};

struct ProfileFit {
  HardwareProfile profile;       // the rates given, the fitted efficiencies and overheads
  double mean_abs_rel_error = 0; // over the steps, |predicted - measured| / measured
  double total_rel_error = 0;    // (sum predicted - sum measured) / sum measured
};

// `rates`: a profile with the measured rates; its efficiencies are the start.
ProfileFit FitProfile(std::span<const MeasuredStep> steps, const HardwareProfile& rates, const StepCostModel& cost);

}  // namespace mlaserve
