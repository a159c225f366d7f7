// Prometheus metrics in SGLang's names and types (prefix "sglang:", label model_name), served at
// GET /metrics with --enable-metrics in the text exposition format 0.0.4: the engine's gauges
// and counters, read from its stats snapshot, and the per-request latency histograms that the
// API layer observes as requests finish. docs/server.md lists them.
// Thread-safe: Observe* may be called from any handler thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine_types.h"

namespace mlaserve {

// A label value as the text format writes it between double quotes: backslash, double quote
// and line feed escaped as \\, \" and \n.
std::string EscapeLabelValue(std::string_view value);

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds_s);
  void Observe(double value_s);
  // Appends the Prometheus text (_bucket, _sum, _count) for `name` with `labels`
  // (already rendered: `name="value",...`).
  void Render(const std::string& name, const std::string& help, const std::string& labels,
              std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket; cumulated at render time
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(const std::string& model_name);

  // One finished request: its latencies in seconds (ttft 0 when it produced no token).
  void ObserveRequest(double queue_s, double ttft_s, double e2e_s, int completion_tokens);
  void ObserveInterTokenLatency(double seconds);

  std::string Render(const EngineStatsSnapshot& stats) const;

 private:
  std::string labels_;  // model_name="...", escaped
  mutable std::mutex mu_;
  Histogram ttft_, e2e_, tpot_, itl_, queue_;
};

}  // namespace mlaserve
