// The latencies of the requests that finished in the last minutes (the dashboard's TTFT / TPOT
// percentiles): a fixed ring of the newest kCapacity requests, each with its finish time.
// Memory is fixed at construction; Observe is one short lock per finished request.
// Thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <mutex>

namespace mlaserve {

struct LatencyPercentiles {
  int count = 0;  // requests in the window
  double ttft_p50_s = 0, ttft_p90_s = 0, ttft_p99_s = 0;
  double tpot_p50_s = 0, tpot_p90_s = 0, tpot_p99_s = 0;  // requests with at least 2 tokens
};

class RecentLatencies {
 public:
  static constexpr int kCapacity = 4096;
  using Clock = std::chrono::steady_clock;

  // One finished request that produced tokens: its time to first token and, with 2 or more
  // tokens, its time per output token after the first (tpot_s < 0: none).
  void Observe(Clock::time_point finished, double ttft_s, double tpot_s);
  // Nearest-rank percentiles over the requests that finished in (now - window, now].
  LatencyPercentiles Over(Clock::time_point now, Clock::duration window) const;

 private:
  struct Entry {
    Clock::time_point finished;
    float ttft_s;
    float tpot_s;  // < 0: none
  };
  mutable std::mutex mu_;
  std::array<Entry, kCapacity> ring_{};
  int next_ = 0;
  int size_ = 0;
};

}  // namespace mlaserve
