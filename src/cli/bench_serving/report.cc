// bench-serving's report: SGLang's "Serving Benchmark Result" block, column for column, and
// the same numbers as one JSON line with SGLang's key names.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <system_error>

#include "cli/bench_serving/bench_serving.h"

namespace mlaserve::cli::bench_serving {
namespace {

using json = nlohmann::json;

// A Python float's str(): "inf", "2.0", "0.25".
std::string PythonFloat(double x) {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x);
  std::string s(buf, ec == std::errc() ? end : buf);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

void Row(const char* label, const std::string& value) { std::printf("%-40s %-10s\n", label, value.c_str()); }
void Row(const char* label, long long value) { std::printf("%-40s %-10lld\n", label, value); }
void Row(const char* label, double value) { std::printf("%-40s %-10.2f\n", label, value); }
}  // namespace

void PrintMetrics(const ServingFlags& f, const Metrics& m) {
  const double d = m.duration_s;
  std::printf("\n============ Serving Benchmark Result ============\n");
  Row("Backend:", f.backend_name);
  Row("Traffic request rate:", PythonFloat(f.request_rate));
  Row("Max request concurrency:", f.max_concurrency > 0 ? std::to_string(f.max_concurrency) : "not set");
  Row("Successful requests:", (long long)m.completed);
  Row("Benchmark duration (s):", d);
  Row("Total input tokens:", m.total_input);
  Row("Total generated tokens:", m.total_output);
  Row("Request throughput (req/s):", m.completed / d);
  Row("Input token throughput (tok/s):", m.total_input / d);
  Row("Output token throughput (tok/s):", m.total_output / d);
  Row("Total token throughput (tok/s):", (m.total_input + m.total_output) / d);
  Row("Concurrency:", m.concurrency);
  std::printf("----------------End-to-End Latency----------------\n");
  Row("Mean E2E Latency (ms):", m.e2e.mean);
  Row("Median E2E Latency (ms):", m.e2e.median);
  std::printf("---------------Time to First Token----------------\n");
  Row("Mean TTFT (ms):", m.ttft.mean);
  Row("Median TTFT (ms):", m.ttft.median);
  Row("P99 TTFT (ms):", m.ttft.p99);
  std::printf("-----Time per Output Token (excl. 1st token)------\n");
  Row("Mean TPOT (ms):", m.tpot.mean);
  Row("Median TPOT (ms):", m.tpot.median);
  Row("P99 TPOT (ms):", m.tpot.p99);
  std::printf("---------------Inter-Token Latency----------------\n");
  Row("Mean ITL (ms):", m.itl.mean);
  Row("Median ITL (ms):", m.itl.median);
  Row("P95 ITL (ms):", m.itl.p95);
  Row("P99 ITL (ms):", m.itl.p99);
  Row("Max ITL (ms):", m.itl.max);
  std::printf("==================================================\n");
  std::fflush(stdout);
}

json MetricsJson(const ServingFlags& f, const Metrics& m, int num_requests) {
  const double d = m.duration_s;
  return json{{"backend", f.backend_name},
              {"dataset_name", f.dataset_name},
              {"request_rate", std::isinf(f.request_rate) ? json("inf") : json(f.request_rate)},
              {"max_concurrency", f.max_concurrency > 0 ? json(f.max_concurrency) : json(nullptr)},
              {"random_input_len", f.random_input_len},
              {"random_output_len", f.random_output_len},
              {"random_range_ratio", f.random_range_ratio},
              {"duration", d},
              {"completed", m.completed},
              {"failed", num_requests - m.completed},
              {"total_input_tokens", m.total_input},
              {"total_output_tokens", m.total_output},
              {"request_throughput", m.completed / d},
              {"input_throughput", m.total_input / d},
              {"output_throughput", m.total_output / d},
              {"total_throughput", (m.total_input + m.total_output) / d},
              {"mean_e2e_latency_ms", m.e2e.mean},
              {"median_e2e_latency_ms", m.e2e.median},
              {"std_e2e_latency_ms", m.e2e.std},
              {"p99_e2e_latency_ms", m.e2e.p99},
              {"mean_ttft_ms", m.ttft.mean},
              {"median_ttft_ms", m.ttft.median},
              {"std_ttft_ms", m.ttft.std},
              {"p99_ttft_ms", m.ttft.p99},
              {"mean_tpot_ms", m.tpot.mean},
              {"median_tpot_ms", m.tpot.median},
              {"std_tpot_ms", m.tpot.std},
              {"p99_tpot_ms", m.tpot.p99},
              {"mean_itl_ms", m.itl.mean},
              {"median_itl_ms", m.itl.median},
              {"std_itl_ms", m.itl.std},
              {"p95_itl_ms", m.itl.p95},
              {"p99_itl_ms", m.itl.p99},
              {"max_itl_ms", m.itl.max},
              {"concurrency", m.concurrency}};
}

}  // namespace mlaserve::cli::bench_serving
