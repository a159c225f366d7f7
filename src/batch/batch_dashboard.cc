#include "batch/batch_dashboard.h"

#include <algorithm>

namespace mlaserve::batch {

nlohmann::json BatchDashboardData(const RunnerStats& stats, std::chrono::steady_clock::time_point started,
                                  std::chrono::steady_clock::time_point now) {
  const double elapsed_s = std::chrono::duration<double>(now - started).count();
  const int total = stats.total, done = stats.done, failed = stats.failed;
  const int left = std::max(0, total - done - failed);
  const double rate = double(int(stats.done_this_run)) / std::max(elapsed_s, 1e-9);
  const int64_t down_since_ms = stats.down_since_ms;
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const double down_for_s = down_since_ms == 0 ? 0.0 : double(now_ms - down_since_ms) / 1000.0;
  const ProvenanceTally::Mix mix = stats.provenance.Get();
  return {{"kind", "batch"},
          {"uptime_s", elapsed_s},
          {"total", total},
          {"done", done},
          {"failed", failed},
          {"running", int(stats.running)},
          {"left", left},
          {"done_this_run", int(stats.done_this_run)},
          {"failed_this_run", int(stats.failed_this_run)},
          {"new_tokens", int64_t(stats.new_tokens)},
          // No rate to project from while no server answers (as the progress line says "paused").
          {"eta_s", down_for_s > 0 || rate <= 0 ? nlohmann::json() : nlohmann::json(double(left) / rate)},
          {"outages", int(stats.outages)},
          {"outage_s", double(stats.outage_ms) / 1000.0 + down_for_s},
          {"down_for_s", down_for_s},
          {"interruptions", int(stats.interruptions)},
          {"continued", int(stats.continued)},
          {"restarted", int(stats.restarted)},
          {"tokens_by_kv_format", mix.tokens_by_kv_format},
          {"tokens_by_server", mix.tokens_by_server}};
}

}  // namespace mlaserve::batch
