#include "sim/virtual_run.h"

#include <algorithm>
#include <limits>

namespace mlaserve {

Result<VirtualRunResult> RunOnVirtualClock(Engine& engine, VirtualClock& clock, std::span<const TimedRequest> workload,
                                           int max_concurrency, double request_latency_s) {
  VirtualRunResult out;
  out.requests.resize(workload.size());
  const size_t n = workload.size();
  const int limit = max_concurrency > 0 ? max_concurrency : std::numeric_limits<int>::max();
  size_t next = 0, done = 0;
  int in_flight = 0;
  std::vector<double> last_chunk_s(n, 0.0);
  double first_send_s = std::numeric_limits<double>::infinity(), last_end_s = 0, weighted_running = 0;
  double slot_freed_s = 0;  // when the concurrency limit last let one more in
  while (done < n) {
    // Everything sent by now (at its arrival or when a slot freed) and past the request latency
    // goes in (a step may have run past either).
    auto sent_s = [&](size_t i) { return std::max(workload[i].arrival_s, slot_freed_s); };
    while (next < n && in_flight < limit && sent_s(next) + request_latency_s <= clock.seconds()) {
      const size_t i = next++;
      VirtualRequestResult& r = out.requests[i];
      r.send_s = sent_s(i);
      r.prompt_len = int(workload[i].prompt.size());
      first_send_s = std::min(first_send_s, r.send_s);
      GenerateRequest request;
      request.rid = "sim-" + std::to_string(i);
      request.input_ids = workload[i].prompt;
      request.sampling.temperature = 0.0f;
      request.sampling.max_new_tokens = workload[i].output_len;
      request.sampling.ignore_eos = true;
      const Status submitted = engine.Submit(std::move(request), [&, i](const OutputView& chunk) {
        VirtualRequestResult& res = out.requests[i];
        const double now = clock.seconds();
        if (!chunk.new_token_ids.empty()) {
          if (res.output_len == 0) {
            res.first_token_s = now - res.send_s;
          } else {
            // bench-serving's rule for a chunk of k tokens: k gaps of gap / k.
            const double k = double(chunk.new_token_ids.size());
            for (size_t g = 0; g < chunk.new_token_ids.size(); ++g) res.itl_s.push_back((now - last_chunk_s[i]) / k);
          }
          res.output_len += int(chunk.new_token_ids.size());
          last_chunk_s[i] = now;
        }
        if (chunk.finished) {
          res.success = chunk.finish_reason == FinishReason::kLength;
          if (!res.success) res.error = std::string(chunk.error);
          res.end_s = now;
          last_end_s = std::max(last_end_s, now);
          ++done;
          if (in_flight-- == limit) slot_freed_s = now;
        }
      });
      if (!submitted.ok()) return Status::Error("request " + std::to_string(i) + ": " + submitted.message());
      ++in_flight;
    }
    const double before_s = clock.seconds();
    if (engine.Step()) {
      const EngineStatsSnapshot s = engine.stats();
      const double after_s = clock.seconds();
      out.timeline.push_back({.t_s = after_s, .running = int(s.num_running_reqs), .queued = int(s.num_queue_reqs),
                              .token_usage = s.token_usage});
      weighted_running += double(s.num_running_reqs) * (after_s - before_s);
      out.max_running = std::max(out.max_running, int(s.num_running_reqs));
      ++out.steps;
      continue;
    }
    // Nothing to run: the next arrival (or, at the concurrency limit, a free slot: impossible
    // while idle) moves the clock.
    if (next < n && in_flight < limit) {
      // (Rounded up to the clock's tick, so that the arrival is then not in the future.)
      clock.AdvanceTo(Clock::time_point(std::chrono::ceil<Clock::duration>(
          std::chrono::duration<double>(sent_s(next) + request_latency_s))));
      continue;
    }
    if (done < n) return Status::Error("the engine stopped with " + std::to_string(n - done) + " requests unfinished");
  }
  out.duration_s = n > 0 ? last_end_s - first_send_s : 0;
  out.mean_running = out.duration_s > 0 ? weighted_running / out.duration_s : 0;
  return out;
}

}  // namespace mlaserve
