// SGLang's calculate_metrics: token totals, TTFT, TPOT, ITL and end-to-end latency summaries
// (mean, median, population std as numpy's, percentiles) over the successful requests.
#include <cmath>

#include "cli/bench_serving/bench_serving.h"
#include "core/percentile.h"

namespace mlaserve::cli::bench_serving {
namespace {

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / double(v.size());
}

double StdDev(const std::vector<double>& v) {  // population, as numpy's np.std
  const double m = Mean(v);
  double sum = 0;
  for (double x : v) sum += (x - m) * (x - m);
  return v.empty() ? 0 : std::sqrt(sum / double(v.size()));
}

Summary Summarize(const std::vector<double>& values_s) {
  Summary s{.mean = Mean(values_s) * 1e3,
            .median = Percentile(values_s, 50) * 1e3,
            .std = StdDev(values_s) * 1e3,
            .p95 = Percentile(values_s, 95) * 1e3,
            .p99 = Percentile(values_s, 99) * 1e3,
            .max = Percentile(values_s, 100) * 1e3};
  return s;
}

}  // namespace

Metrics ComputeMetrics(const std::vector<RequestResult>& results, double duration_s) {
  Metrics m{.duration_s = duration_s};
  std::vector<double> ttfts_s, tpots_s, itls_s, e2e_s;
  double e2e_sum_s = 0;
  for (const RequestResult& r : results) {
    if (!r.success) continue;
    ++m.completed;
    m.total_input += r.prompt_len;
    m.total_output += r.output_len;
    if (r.output_len > 1) tpots_s.push_back((r.latency_s - r.ttft_s) / (r.output_len - 1));
    itls_s.insert(itls_s.end(), r.itl_s.begin(), r.itl_s.end());
    ttfts_s.push_back(r.ttft_s);
    e2e_s.push_back(r.latency_s);
    e2e_sum_s += r.latency_s;
  }
  m.ttft = Summarize(ttfts_s);
  m.tpot = Summarize(tpots_s);
  m.itl = Summarize(itls_s);
  m.e2e = Summarize(e2e_s);
  m.concurrency = e2e_sum_s / duration_s;
  return m;
}

}  // namespace mlaserve::cli::bench_serving
