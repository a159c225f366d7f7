#include "batch/run_gate.h"

#include <algorithm>
#include <cstdio>

#include "batch/batch_runner.h"

namespace mlaserve::batch {
namespace {

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

}  // namespace

RunGate::RunGate(std::function<bool()> probe, std::string endpoints, double report_interval_s,
                 std::function<void(const std::string&)> note, RunnerStats& stats)
    : probe_(std::move(probe)),
      endpoints_(std::move(endpoints)),
      report_interval_s_(report_interval_s),
      note_(std::move(note)),
      stats_(stats) {}

RunGate::Wait RunGate::AwaitServer() {
  std::unique_lock<std::mutex> lock(mu_);
  if (stop_) return Wait::kStopped;
  if (probing_) {
    const uint64_t seen = answers_;
    cv_.wait(lock, [&] { return answers_ != seen || stop_; });
    return stop_ ? Wait::kStopped : last_answer_;
  }
  probing_ = true;
  lock.unlock();
  const Wait answer = ProbeUntilUp();
  lock.lock();
  probing_ = false;
  ++answers_;
  last_answer_ = answer;
  cv_.notify_all();
  return answer;
}

RunGate::Wait RunGate::ProbeUntilUp() {
  if (probe_()) return Wait::kWasUp;
  const Clock::time_point down_from = Clock::now();
  ++stats_.outages;
  stats_.down_since_ms = std::chrono::duration_cast<std::chrono::milliseconds>(down_from.time_since_epoch()).count();
  const int waiting = stats_.running;
  note_("no server answers /health (" + endpoints_ + "): the run is paused" +
        (waiting > 0 ? ", " + std::to_string(waiting) + " records wait for one (their tokens so far are kept)" : "") +
        "; it goes on when one answers (Ctrl-C stops it)");
  double backoff_s = 0.1;
  Clock::time_point next_report = down_from + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(report_interval_s_));
  Wait answer = Wait::kCameBack;
  for (;;) {
    if (!Sleep(backoff_s)) {
      answer = Wait::kStopped;
      break;
    }
    if (probe_()) break;
    backoff_s = std::min(backoff_s * 2, 1.0);  // the outage time reported is late by at most this
    if (Clock::now() >= next_report) {
      note_("still no server answers /health (" + endpoints_ + "), for " + Seconds(SecondsSince(down_from)) +
            " now; waiting on");
      next_report += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(report_interval_s_));
    }
  }
  const double down_s = SecondsSince(down_from);
  // Ended before counted: a reader of both (the dashboard) never counts this outage twice.
  stats_.down_since_ms = 0;
  stats_.outage_ms += int64_t(down_s * 1000);
  if (answer == Wait::kCameBack) note_("a server answers /health again after " + Seconds(down_s) + ": the run resumes");
  return answer;
}

bool RunGate::Sleep(double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return stop_.load(); });
}

void RunGate::RequestStop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

}  // namespace mlaserve::batch
