// Where the engine's time comes from: one Clock, injected, read by the engine, the scheduler and
// the output processor for every timestamp they keep (submit, first scheduled, first token,
// delivery, the decode log interval, speculative step timing). RealClock is the process's
// steady clock (the server, offline tools); VirtualClock only moves when its owner advances it
// (`mlaserve simulate`: a cost model advances it by each step's predicted time, so the real
// scheduler and output processor run on simulated time).
// Threads: Now() is called on the engine thread; a VirtualClock is advanced on that thread
// between steps (the simulator drives Engine::Step itself).
#pragma once

#include <chrono>

#include "core/check.h"

namespace mlaserve {

class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;
  virtual time_point Now() const = 0;

  // The real clock, shared by every engine that is not given one (lives for the process).
  static const Clock& Real();
};

class RealClock final : public Clock {
 public:
  time_point Now() const override { return std::chrono::steady_clock::now(); }
};

inline const Clock& Clock::Real() {
  static const RealClock real;
  return real;
}

// Starts at time_point{} (zero since the epoch) and moves forward only through Advance.
class VirtualClock final : public Clock {
 public:
  time_point Now() const override { return now_; }
  void Advance(duration d) {
    MLA_CHECK(d.count() >= 0);
    now_ += d;
  }
  void AdvanceSeconds(double seconds) {
    Advance(std::chrono::duration_cast<duration>(std::chrono::duration<double>(seconds)));
  }
  void AdvanceTo(time_point t) {
    if (t > now_) now_ = t;
  }
  // Seconds since the clock started.
  double seconds() const { return std::chrono::duration<double>(now_.time_since_epoch()).count(); }

 private:
  time_point now_{};
};

inline double ElapsedSeconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace mlaserve
