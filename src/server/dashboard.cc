#include "server/dashboard.h"

namespace mlaserve {

using nlohmann::json;

json DashboardData(const DashboardSources& src, std::chrono::steady_clock::time_point now, double uptime_s) {
  const EngineStatsSnapshot& s = src.stats;
  const LatencyPercentiles lat = src.latencies.Over(now, kDashboardLatencyWindow);
  size_t total_requests = 0;
  json rows = json::array();
  for (const RequestBoard::Row& r : src.board.Rows(now, kDashboardRequestRows, &total_requests)) {
    rows.push_back({{"rid", r.rid}, {"age_s", r.age_s}, {"prompt_tokens", r.prompt_tokens},
                    {"completion_tokens", r.completion_tokens}, {"state", r.state}});
  }
  const json& info = src.server_info;
  json tp = nullptr;
  if (src.tp) {
    tp = {{"size", src.tp_size}, {"rank0_collective_calls_total", src.tp->calls},
          {"rank0_bytes_received_total", src.tp->bytes_received}, {"rank0_collective_seconds_total", double(src.tp->ns) / 1e9},
          {"bytes_received_total_by_rank", src.tp->bytes_received_by_rank}};
  }
  return {{"kind", "server"},
          {"uptime_s", uptime_s},
          {"model", info.value("served_model_name", "")},
          {"kv_cache_dtype", info.value("kv_cache_dtype", "")},
          {"speculative_algorithm", info.value("speculative_algorithm", json())},
          {"max_total_num_tokens", s.max_total_num_tokens},
          {"num_running_reqs", s.num_running_reqs},
          {"num_queue_reqs", s.num_queue_reqs},
          {"num_used_tokens", s.num_used_tokens},
          {"token_usage", s.token_usage},
          {"cache_hit_rate", s.cache_hit_rate},
          {"gen_throughput", s.gen_throughput},
          {"prompt_tokens_total", s.prompt_tokens_total},
          {"generation_tokens_total", s.generation_tokens_total},
          {"cached_tokens_total", s.cached_tokens_total},
          {"num_requests_total", s.num_requests_total},
          {"num_aborted_requests_total", s.num_aborted_requests_total},
          {"num_retracted_requests_total", s.num_retracted_requests_total},
          {"spec_accept_length", s.spec_accept_length},
          {"spec_verify_steps_total", s.spec_verify_steps_total},
          {"spec_accepted_tokens_total", s.spec_accepted_tokens_total},
          {"latency", {{"window_s", kDashboardLatencyWindow.count()}, {"requests", lat.count},
                       {"ttft_p50_s", lat.ttft_p50_s}, {"ttft_p90_s", lat.ttft_p90_s}, {"ttft_p99_s", lat.ttft_p99_s},
                       {"tpot_p50_s", lat.tpot_p50_s}, {"tpot_p90_s", lat.tpot_p90_s}, {"tpot_p99_s", lat.tpot_p99_s}}},
          {"tp", tp},
          {"requests", {{"total", total_requests}, {"rows", rows}}}};
}

}  // namespace mlaserve
