#include "sim/virtual_run.h"

#include <algorithm>
#include <chrono>
#include <limits>

namespace mlaserve {
namespace {

// Each request's successor (the conversation's next turn), or -1; an error for a bad `follows`.
Result<std::vector<int>> Successors(std::span<const TimedRequest> workload) {
  std::vector<int> next_turn(workload.size(), -1);
  for (size_t i = 0; i < workload.size(); ++i) {
    const int f = workload[i].follows;
    if (f < 0) continue;
    if (size_t(f) >= i) return Status::Error("request " + std::to_string(i) + " follows a later request " + std::to_string(f));
    if (next_turn[size_t(f)] >= 0) {
      return Status::Error("requests " + std::to_string(next_turn[size_t(f)]) + " and " + std::to_string(i) +
                           " both follow request " + std::to_string(f));
    }
    next_turn[size_t(f)] = int(i);
  }
  return next_turn;
}

}  // namespace

Result<VirtualRunResult> RunOnVirtualClock(Engine& engine, VirtualClock& clock, std::span<const TimedRequest> workload,
                                           int max_concurrency, double request_latency_s) {
  auto successors = Successors(workload);
  if (!successors.ok()) return successors.status();
  const std::vector<int>& next_turn = *successors;
  VirtualRunResult out;
  out.requests.resize(workload.size());
  const size_t n = workload.size();
  const int limit = max_concurrency > 0 ? max_concurrency : std::numeric_limits<int>::max();
  // Independent requests in workload order (they arrive in that order); later turns wait in
  // `ready` from the moment their earlier turn finished.
  std::vector<size_t> fresh;
  for (size_t i = 0; i < n; ++i) {
    if (workload[i].follows < 0) fresh.push_back(i);
  }
  struct Ready {
    size_t index;
    double sent_s;
  };
  std::vector<Ready> ready;
  std::vector<std::vector<TokenId>> sent_prompt(n), answer(n);  // kept only for a request with a successor
  size_t next_fresh = 0, done = 0;
  int in_flight = 0;  // conversations in flight: a later turn keeps its earlier turn's slot
  std::vector<double> last_chunk_s(n, 0.0);
  double first_send_s = std::numeric_limits<double>::infinity(), last_end_s = 0, weighted_running = 0;
  double slot_freed_s = 0;  // when the concurrency limit last let one more in
  auto fresh_sent_s = [&](size_t i) { return std::max(workload[i].arrival_s, slot_freed_s); };

  auto submit = [&](size_t i, double sent_s) -> Status {
    VirtualRequestResult& r = out.requests[i];
    r.send_s = sent_s;
    first_send_s = std::min(first_send_s, r.send_s);
    GenerateRequest request;
    request.rid = "sim-" + std::to_string(i);
    if (const int f = workload[i].follows; f >= 0) {
      request.input_ids = std::move(sent_prompt[size_t(f)]);
      request.input_ids.insert(request.input_ids.end(), answer[size_t(f)].begin(), answer[size_t(f)].end());
      answer[size_t(f)].clear();
    }
    request.input_ids.insert(request.input_ids.end(), workload[i].prompt.begin(), workload[i].prompt.end());
    r.prompt_len = int(request.input_ids.size());
    if (next_turn[i] >= 0) sent_prompt[i] = request.input_ids;
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
        if (next_turn[i] >= 0) answer[i].insert(answer[i].end(), chunk.new_token_ids.begin(), chunk.new_token_ids.end());
      }
      if (chunk.finished) {
        res.success = chunk.finish_reason == FinishReason::kLength;
        if (!res.success) res.error = std::string(chunk.error);
        res.end_s = now;
        last_end_s = std::max(last_end_s, now);
        ++done;
        if (next_turn[i] >= 0 && res.success) {
          ready.push_back({size_t(next_turn[i]), now});  // the same slot goes on
        } else {
          // A failed turn ends its conversation: the turns after it count as done, unsent.
          for (int later = next_turn[i]; later >= 0; later = next_turn[size_t(later)]) {
            out.requests[size_t(later)].error = "an earlier turn failed";
            ++done;
          }
          if (in_flight-- == limit) slot_freed_s = now;
        }
      }
    });
    if (!submitted.ok()) return Status::Error("request " + std::to_string(i) + ": " + submitted.message());
    return Status::Ok();
  };

  while (done < n) {
    // Everything sent by now (at its arrival, when a slot freed, or when its earlier turn
    // finished) and past the request latency goes in (a step may have run past it).
    for (size_t k = 0; k < ready.size();) {
      if (ready[k].sent_s + request_latency_s <= clock.seconds()) {
        const Ready r = ready[k];
        ready.erase(ready.begin() + std::ptrdiff_t(k));
        MLA_RETURN_IF_ERROR(submit(r.index, r.sent_s));
      } else {
        ++k;
      }
    }
    while (next_fresh < fresh.size() && in_flight < limit &&
           fresh_sent_s(fresh[next_fresh]) + request_latency_s <= clock.seconds()) {
      const size_t i = fresh[next_fresh++];
      MLA_RETURN_IF_ERROR(submit(i, fresh_sent_s(i)));
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
    // Nothing to run: the next send moves the clock (a later turn's, or the next arrival's when
    // a slot is free), rounded up to the clock's tick so that it is then not in the future.
    double next_s = std::numeric_limits<double>::infinity();
    for (const Ready& r : ready) next_s = std::min(next_s, r.sent_s);
    if (next_fresh < fresh.size() && in_flight < limit) next_s = std::min(next_s, fresh_sent_s(fresh[next_fresh]));
    if (next_s < std::numeric_limits<double>::infinity()) {
      clock.AdvanceTo(Clock::time_point(
          std::chrono::ceil<Clock::duration>(std::chrono::duration<double>(next_s + request_latency_s))));
      continue;
    }
    if (done < n) return Status::Error("the engine stopped with " + std::to_string(n - done) + " requests unfinished");
  }
  out.duration_s = n > 0 ? last_end_s - first_send_s : 0;
  out.mean_running = out.duration_s > 0 ? weighted_running / out.duration_s : 0;
  return out;
}

}  // namespace mlaserve
