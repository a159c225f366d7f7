#include "server/recent_latencies.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mlaserve {
namespace {

// The nearest-rank percentile (p in (0, 1]) of sorted values; 0 for none.
double Percentile(const std::vector<float>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = size_t(std::ceil(p * double(sorted.size())));
  return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
}

}  // namespace

void RecentLatencies::Observe(Clock::time_point finished, double ttft_s, double tpot_s) {
  std::lock_guard<std::mutex> lock(mu_);
  ring_[size_t(next_)] = Entry{finished, float(ttft_s), float(tpot_s)};
  next_ = (next_ + 1) % kCapacity;
  size_ = std::min(size_ + 1, kCapacity);
}

LatencyPercentiles RecentLatencies::Over(Clock::time_point now, Clock::duration window) const {
  std::vector<float> ttft, tpot;  // per dashboard poll, not per token
  {
    std::lock_guard<std::mutex> lock(mu_);
    ttft.reserve(size_t(size_));
    for (int i = 0; i < size_; ++i) {
      const Entry& e = ring_[size_t(i)];
      if (e.finished <= now - window || e.finished > now) continue;
      ttft.push_back(e.ttft_s);
      if (e.tpot_s >= 0) tpot.push_back(e.tpot_s);
    }
  }
  std::sort(ttft.begin(), ttft.end());
  std::sort(tpot.begin(), tpot.end());
  return LatencyPercentiles{.count = int(ttft.size()),
                            .ttft_p50_s = Percentile(ttft, 0.5),
                            .ttft_p90_s = Percentile(ttft, 0.9),
                            .ttft_p99_s = Percentile(ttft, 0.99),
                            .tpot_p50_s = Percentile(tpot, 0.5),
                            .tpot_p90_s = Percentile(tpot, 0.9),
                            .tpot_p99_s = Percentile(tpot, 0.99)};
}

}  // namespace mlaserve
