// `simulate --hardware this-host`: a hardware profile of this machine, measured. The rates are
// the same run's probes (read bandwidth, and the arithmetic peak of the products the chosen
// kernel table runs: vdpbf16ps where it multiplies in bf16, else its fp32 FMA); the efficiencies
// and overheads are fitted (sim/fit_profile.h) to the wall time of real engine steps on
// --model-path's weights: a calibration workload of single-request decode, batched decode,
// prefill of several prompts and of one long one, and batched decode at ~800 tokens of
// context, run by the real engine with the real runner, each step's work counted by the same
// cost model the simulation uses.
#pragma once

#include <string>

#include "cli/model_setup.h"
#include "engine/engine_types.h"
#include "sim/hardware_profile.h"
#include "sim/step_cost.h"

namespace mlaserve::cli {

// model_flags: the model directory and cache (format, page size) the simulation uses; the
// engine options: its scheduler flags (chunk sizes). Logs the probes and the fit.
Result<HardwareProfile> CalibrateThisHost(ModelFlags model_flags, const StepCostModel& cost,
                                          const EngineOptions& options);

}  // namespace mlaserve::cli
