// Part of `simulate --hardware this-host` (cli/calibrate_host.h): what serving over HTTP adds to
// a decode step beyond what the in-process calibration times. The real server (this binary's
// `serve`, a child process on the same weights and cache flags) decodes 8 streaming requests one
// at a time (sent at 2 per second, so that a small model's server idles between them as under a
// light load), then kServerCostRequests at once, timed by bench-serving's client (medians); the same
// workloads are simulated on the in-process profile; the extra TPOT at the two batch sizes
// gives a cost per step (the handoff between the engine thread and the handler threads) and a
// cost per streamed chunk (the copies, the JSON and the socket writes of the handler threads,
// which share the host's cores with the forward); and the lone requests' time to first token
// beyond their predicted prefill is the latency from the client's send to the engine's intake.
// On the 2-core host the costs are tens of microseconds a step and a chunk and ~1 ms a request:
// most of a step of the bundled model, under 1% of one on the reference shape.
#pragma once

#include "cli/model_setup.h"
#include "engine/engine_types.h"
#include "sim/hardware_profile.h"
#include "sim/step_cost.h"

namespace mlaserve::cli {

inline constexpr int kServerCostRequests = 16;

struct ServerCost {
  double seconds_per_step = 0, seconds_per_chunk = 0;  // >= 0
  double real_tpot_one_s = 0, predicted_tpot_one_s = 0;    // 1 request (medians)
  double real_tpot_many_s = 0, predicted_tpot_many_s = 0;  // kServerCostRequests
  double request_latency_s = 0;  // a lone request's TTFT beyond its predicted steps (>= 0)
};

Result<ServerCost> MeasureServerCost(const ModelFlags& flags, const StepCostModel& cost,
                                     const HardwareProfile& in_process, const EngineOptions& options);

}  // namespace mlaserve::cli
