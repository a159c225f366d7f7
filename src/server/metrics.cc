#include "server/metrics.h"

#include <charconv>
#include <cmath>

namespace mlaserve {
namespace {

std::vector<double> LatencyBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
          10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 120.0, 300.0};
}

// The text format's float: the shortest text that reads back as v, or +Inf, -Inf, NaN.
std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  return std::string(buf, end);
}

void Metric(std::string& out, const char* type, const std::string& name, const std::string& help,
            const std::string& labels, double value) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  out += name + "{" + labels + "} " + Number(value) + "\n";
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds_s)
    : bounds_(std::move(upper_bounds_s)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::Render(const std::string& name, const std::string& help, const std::string& labels,
                       std::string& out) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{" + labels + ",le=\"" + Number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{" + labels + ",le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum{" + labels + "} " + Number(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics(const std::string& model_name)
    : labels_("model_name=\"" + EscapeLabelValue(model_name) + "\""),
      ttft_(LatencyBuckets()),
      e2e_(LatencyBuckets()),
      tpot_(LatencyBuckets()),
      itl_(LatencyBuckets()),
      queue_(LatencyBuckets()) {}

void ServerMetrics::ObserveRequest(double queue_s, double ttft_s, double e2e_s, int completion_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.Observe(queue_s);
  e2e_.Observe(e2e_s);
  if (completion_tokens > 0) ttft_.Observe(ttft_s);
  if (completion_tokens > 1) tpot_.Observe((e2e_s - ttft_s) / double(completion_tokens - 1));
}

void ServerMetrics::ObserveInterTokenLatency(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.Observe(seconds);
}

std::string ServerMetrics::Render(const EngineStatsSnapshot& s) const {
  std::string out;
  const std::string& l = labels_;
  // Counters (SGLang's TokenizerMetricsCollector, and the scheduler's retraction counter).
  Metric(out, "counter", "sglang:prompt_tokens_total", "Number of prefill tokens processed.", l, double(s.prompt_tokens_total));
  Metric(out, "counter", "sglang:generation_tokens_total", "Number of generation tokens processed.", l, double(s.generation_tokens_total));
  Metric(out, "counter", "sglang:cached_tokens_total", "Number of cached prompt tokens.", l, double(s.cached_tokens_total));
  Metric(out, "counter", "sglang:num_requests_total", "Number of requests processed.", l, double(s.num_requests_total));
  Metric(out, "counter", "sglang:num_aborted_requests_total", "Number of requests aborted.", l, double(s.num_aborted_requests_total));
  Metric(out, "counter", "sglang:num_retracted_requests_total", "Total number of retracted requests.", l, double(s.num_retracted_requests_total));
  // Gauges (SGLang's SchedulerMetricsCollector).
  Metric(out, "gauge", "sglang:num_running_reqs", "The number of running requests.", l, double(s.num_running_reqs));
  Metric(out, "gauge", "sglang:num_used_tokens", "The number of used tokens.", l, double(s.num_used_tokens));
  Metric(out, "gauge", "sglang:token_usage", "The token usage.", l, s.token_usage);
  Metric(out, "gauge", "sglang:gen_throughput", "The generation throughput (token/s).", l, s.gen_throughput);
  Metric(out, "gauge", "sglang:num_queue_reqs", "The number of requests in the waiting queue.", l, double(s.num_queue_reqs));
  Metric(out, "gauge", "sglang:cache_hit_rate", "The prefix cache hit rate.", l, s.cache_hit_rate);
  Metric(out, "gauge", "sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", l, double(s.max_total_num_tokens));
  Metric(out, "gauge", "sglang:num_retracted_reqs", "The number of retracted requests.", l, double(s.num_retracted_reqs));
  // Speculative decoding (--speculative-algorithm), over the last decode log interval; 0 when off.
  Metric(out, "gauge", "sglang:spec_accept_length", "The average acceptance length of speculative decoding.", l,
         s.spec_accept_length);
  Metric(out, "gauge", "sglang:spec_accept_rate", "The average acceptance rate of speculative decoding.", l,
         s.spec_accept_rate);
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.Render("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", l, out);
  e2e_.Render("sglang:e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds.", l, out);
  tpot_.Render("sglang:time_per_output_token_seconds", "Histogram of time per output token in seconds.", l, out);
  itl_.Render("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", l, out);
  queue_.Render("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", l, out);
  return out;
}

}  // namespace mlaserve
