// What lets a batch run's workers go on: a server that answers, and no stop request.
// While no endpoint answers /health the whole run pauses: the first worker to find none probes
// (backoff 0.1 s doubling to 1 s) and says so once, the others wait for its answer; when one
// answers again it says how long the outage lasted (wall time, counted once per outage, not per
// waiting record). An outage is never a record failure, however long: a "still waiting" line
// follows every report_interval_s. A stop request (SIGINT / SIGTERM) wakes every wait at once.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "batch/turn_generator.h"

namespace mlaserve::batch {

struct RunnerStats;

class RunGate {
 public:
  // probe: one round of /health probes, true when some endpoint answers (it must not block for
  // long). endpoints names them in messages. note prints one line (stderr in the CLI).
  // stats (outages, outage wall time, "down since" for the progress display) must outlive the gate.
  RunGate(std::function<bool()> probe, std::string endpoints, double report_interval_s,
          std::function<void(const std::string&)> note, RunnerStats& stats);

  enum class Wait {
    kWasUp,     // the first probe answered: whatever went wrong was not an outage
    kCameBack,  // no server answered for a while; one does now
    kStopped,   // a stop was requested while waiting
  };
  // Blocks while no server answers /health (or until a stop request).
  Wait AwaitServer();

  // Sleeps for `seconds` unless a stop is requested first (false).
  bool Sleep(double seconds);

  void RequestStop();
  bool stopping() const { return stop_.load(); }
  // For TurnRequest::cancel: generators give up a request as soon as this is set.
  const std::atomic<bool>& stop_flag() const { return stop_; }

 private:
  Wait ProbeUntilUp();  // run by the one worker that probes

  std::function<bool()> probe_;
  std::string endpoints_;
  double report_interval_s_;
  std::function<void(const std::string&)> note_;
  RunnerStats& stats_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool probing_ = false;    // a worker is probing; the others wait for its answer
  uint64_t answers_ = 0;    // probe answers so far (up or stopped): a waiter's wake-up condition
  Wait last_answer_ = Wait::kWasUp;
};

}  // namespace mlaserve::batch
