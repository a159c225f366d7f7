// Drives a real Engine on a VirtualClock through a timed workload, as bench-serving drives a
// server: request i is sent at its arrival time (or when one of max_concurrency slots frees)
// and reaches the engine request_latency_s later, the engine steps (its runner advances the
// clock by each step's predicted time), and when nothing runs the clock jumps to the next
// arrival. A conversation's later turn (as `mlaserve batch` regenerates them) is sent when the
// turn before it finishes, in the same slot, its prompt extending that turn's prompt and answer,
// so the prefix cache sees what it sees in a real run. Records per request what bench-serving
// records (send, first token, inter-token gaps, end, token counts) and, after every step, the
// running and queued requests and the token usage.
// Threads: the caller's only (the engine is not Start()ed; Step() runs here).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/types.h"
#include "engine/clock.h"
#include "engine/engine.h"

namespace mlaserve {

struct TimedRequest {
  std::vector<TokenId> prompt;  // follows >= 0: only the tokens after the earlier turn's answer
  int output_len = 0;     // max_new_tokens, end of sequence ignored
  double arrival_s = 0;   // since the start; follows >= 0: not used
  // -1: an independent request. Else the index of an earlier request in the workload whose
  // conversation this continues: sent when that one finishes, with that request's whole prompt
  // and answer before `prompt`. A request is followed by at most one.
  int follows = -1;
};

struct VirtualRequestResult {
  bool success = false;
  std::string error;
  double send_s = 0, first_token_s = 0, end_s = 0;  // on the virtual clock
  std::vector<double> itl_s;                        // gaps between later token chunks
  int prompt_len = 0, output_len = 0;  // prompt_len: the whole prompt sent
};

struct TimelinePoint {
  double t_s = 0;  // after the step
  int running = 0, queued = 0;
  double token_usage = 0;
};

struct VirtualRunResult {
  std::vector<VirtualRequestResult> requests;  // [workload size], in workload order
  std::vector<TimelinePoint> timeline;         // one point per step
  double duration_s = 0;                       // first send to last answer
  int64_t steps = 0;
  int max_running = 0;
  double mean_running = 0;  // time-weighted over the steps
};

// The engine must be built on `clock` (Engine's clock argument) with a runner that advances it.
// An error when a request is refused at Submit (it names the request), a `follows` is not an
// earlier request or is shared, or the engine stalls.
Result<VirtualRunResult> RunOnVirtualClock(Engine& engine, VirtualClock& clock, std::span<const TimedRequest> workload,
                                           int max_concurrency, double request_latency_s = 0);

}  // namespace mlaserve
