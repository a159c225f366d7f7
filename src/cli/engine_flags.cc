#include "cli/engine_flags.h"

namespace mlaserve::cli {

Result<EngineOptions> ReadEngineFlags(Args& args) {
  EngineOptions o;
  o.max_running_requests = args.Int("max-running-requests", o.max_running_requests);
  o.chunked_prefill_size = args.Int("chunked-prefill-size", o.chunked_prefill_size);
  o.max_prefill_tokens = args.Int("max-prefill-tokens", o.max_prefill_tokens);
  const std::string policy = args.Str("schedule-policy", "fcfs");
  o.schedule_conservativeness = args.Double("schedule-conservativeness", 1.0);
  o.disable_radix_cache = args.Switch("disable-radix-cache");
  o.decode_log_interval = args.Int("decode-log-interval", o.decode_log_interval);
  if (policy == "fcfs") o.schedule_policy = SchedulePolicy::kFcfs;
  else if (policy == "lpm") o.schedule_policy = SchedulePolicy::kLpm;
  else return Status::Error("--schedule-policy must be fcfs or lpm, got '" + policy + "'");
  if (o.max_running_requests <= 0) return Status::Error("--max-running-requests must be positive");
  if (o.max_prefill_tokens <= 0) return Status::Error("--max-prefill-tokens must be positive");
  if (o.schedule_conservativeness <= 0) return Status::Error("--schedule-conservativeness must be positive");
  if (o.decode_log_interval <= 0) return Status::Error("--decode-log-interval must be positive");
  return o;
}

int ForwardTokensFor(const EngineOptions& o) {
  const int chunk = o.chunked_prefill_size > 0 ? o.chunked_prefill_size : 2048;
  return chunk + o.max_running_requests;
}

}  // namespace mlaserve::cli
