// mlaserve serve: the HTTP server on one model, with SGLang's flag names. SIGTERM or SIGINT
// drains: new generations get 503, in-flight ones may finish within --drain-timeout, the rest
// are aborted (finish_reason "abort"), and the process exits 0.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/model_setup.h"
#include "engine/engine.h"
#include "server/api_server.h"
#include "server/http_server.h"

namespace mlaserve::cli {
namespace {

// Flags SGLang users may pass that mlaserve does not implement yet: refused, never ignored.
Status RefuseUnimplemented(Args& args) {
  struct Refused {
    const char* flag;
    bool is_switch;
    const char* why;
  };
  const Refused refused[] = {
      {"enable-hierarchical-cache", true, "a host-memory KV tier (HiCache) is not implemented; it would only hold reusable prefixes, not add decode capacity (see mlaserve plan)"},
      {"hicache-size", false, "HiCache is not implemented"},
      {"hicache-ratio", false, "HiCache is not implemented"},
      {"hicache-write-policy", false, "HiCache is not implemented"},
      {"dp-size", false, "data parallelism is not implemented"},
      {"enable-dp-attention", true, "data-parallel attention is not implemented"},
      {"speculative-algorithm", false, "speculative decoding is not implemented"},
  };
  for (const Refused& r : refused) {
    if (r.is_switch ? args.Switch(r.flag) : args.Str(r.flag).has_value()) {
      return Status::Error(std::string("--") + r.flag + " is not supported by mlaserve yet: " + r.why);
    }
  }
  for (const char* tp : {"tp-size", "tp"}) {
    const int n = args.Int(tp, 1);
    if (n != 1) return Status::Error(std::string("--") + tp + " " + std::to_string(n) + " is not supported yet: mlaserve runs one CPU process (tensor parallelism 1)");
  }
  const std::string eviction = args.Str("radix-eviction-policy", "lru");
  if (eviction != "lru") return Status::Error("--radix-eviction-policy " + eviction + " is not supported yet (lru only)");
  return Status::Ok();
}

}  // namespace

int RunServe(Args& args) {
  // Block the shutdown signals in every thread (they are inherited); the main thread waits for
  // them with sigwait once the server runs.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  ModelFlags model_flags = ReadModelFlags(args);
  auto engine_options = ReadEngineFlags(args);
  HttpServerOptions http;
  http.host = args.Str("host", "127.0.0.1");
  http.port = args.Int("port", 30000);
  http.max_connections = args.Int("max-connections", 4096);
  const std::string served_name_flag = args.Str("served-model-name", "");
  const std::string api_key = args.Str("api-key", "");
  const bool enable_metrics = args.Switch("enable-metrics");
  const std::string log_level = args.Str("log-level", "info");
  const double drain_timeout_s = args.Double("drain-timeout", 30.0);
  const Status refused = RefuseUnimplemented(args);
  if (Status s = args.Finish("serve"); !s.ok()) return Fail("serve", s.message(), 2);
  if (!refused.ok()) return Fail("serve", refused.message(), 2);
  if (!engine_options.ok()) return Fail("serve", engine_options.error(), 2);
  if (log_level != "debug" && log_level != "info" && log_level != "warning" && log_level != "error") {
    return Fail("serve", "--log-level must be debug, info, warning or error", 2);
  }
  if (http.port < 0 || http.port > 65535) return Fail("serve", "--port must be in [0, 65535]", 2);
  if (drain_timeout_s < 0) return Fail("serve", "--drain-timeout must be >= 0", 2);
  engine_options->log_batches = log_level == "debug" || log_level == "info";

  // The model's per-call buffers must hold a prefill chunk plus one token per running request.
  if (model_flags.options.max_context <= 0) model_flags.options.max_context = 0;  // model default
  model_flags.options.max_batch_tokens = ForwardTokensFor(*engine_options);
  auto loaded = LoadModel(model_flags, /*need_tokenizer=*/true);
  if (!loaded.ok()) return Fail("serve", loaded.error());
  Model& model = *loaded->model;
  const ModelConfig& c = model.config();
  const std::string served_name = served_name_flag.empty() ? model_flags.model_path : served_name_flag;

  auto pool = CreateEnginePool(*loaded, model_flags.page_size);
  if (!pool.ok()) return Fail("serve", pool.error());
  std::fprintf(stderr, "[mlaserve] model=%s (%s, %d layers), served_model_name=%s, kernels=%s, threads=%d\n",
               model_flags.model_path.c_str(), c.model_type.c_str(), c.num_hidden_layers, served_name.c_str(),
               loaded->kernels->name, model.pool().num_threads());
  if (KvFormatUsesTensorScale(loaded->runner_options.kv_format)) {
    std::fprintf(stderr, "[mlaserve] kv scales: %s\n", loaded->kv_scales_source.c_str());
  }
  std::fprintf(stderr, "[mlaserve] kv_cache_dtype=%s, %s\n", KvFormatName(loaded->runner_options.kv_format),
               loaded->kv_budget.log_line.c_str());
  const double available_gb =
      (loaded->kv_budget.device_memory_bytes - double(model.weight_bytes()) - loaded->kv_budget.kv_bytes) / 1e9;
  std::fprintf(stderr,
               "[mlaserve] max_total_num_tokens=%lld, chunked_prefill_size=%d, max_prefill_tokens=%d, "
               "max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB\n",
               (long long)(*pool)->capacity_tokens(), engine_options->chunked_prefill_size,
               engine_options->max_prefill_tokens, engine_options->max_running_requests, model.max_context(),
               available_gb);

  Engine engine(model, *loaded->kernels, **pool, *engine_options, &*loaded->tokenizer);
  engine.Start();
  nlohmann::json info{{"model_path", model_flags.model_path},
                      {"served_model_name", served_name},
                      {"kv_cache_dtype", KvFormatName(loaded->runner_options.kv_format)},
                      {"page_size", model_flags.page_size},
                      {"context_length", model.max_context()},
                      {"max_running_requests", engine_options->max_running_requests},
                      {"chunked_prefill_size", engine_options->chunked_prefill_size},
                      {"max_prefill_tokens", engine_options->max_prefill_tokens},
                      {"schedule_policy", engine_options->schedule_policy == SchedulePolicy::kLpm ? "lpm" : "fcfs"},
                      {"schedule_conservativeness", engine_options->schedule_conservativeness},
                      {"disable_radix_cache", engine_options->disable_radix_cache},
                      {"enable_metrics", enable_metrics},
                      {"host", http.host},
                      {"port", http.port}};
  ApiServer api(engine, *loaded->tokenizer, model,
                ApiServerOptions{.served_model_name = served_name,
                                 .model_path = model_flags.model_path,
                                 .api_key = api_key,
                                 .enable_metrics = enable_metrics,
                                 .server_info = info});
  auto server = HttpServer::Start(http, [&api](const HttpRequest& r, HttpResponseWriter& w) { api.Handle(r, w); });
  if (!server.ok()) {
    engine.Stop();
    return Fail("serve", server.error());
  }
  std::fprintf(stderr, "[mlaserve] HTTP server listening on http://%s:%d\n", http.host.c_str(),
               (*server)->port());
  std::fprintf(stderr, "The server is fired up and ready to roll!\n");

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::fprintf(stderr, "[mlaserve] received %s: draining (new requests get 503; up to %.0f s for %d in flight)\n",
               signal_number == SIGTERM ? "SIGTERM" : "SIGINT", drain_timeout_s, api.in_flight());
  api.StartDraining();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(drain_timeout_s);
  while ((api.in_flight() > 0 || !engine.idle()) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int left = api.in_flight();
  engine.Stop();  // aborts whatever is still running: those clients get finish_reason "abort"
  while (api.in_flight() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  (*server)->Stop();
  std::fprintf(stderr, "[mlaserve] drained: %d request(s) aborted at the drain timeout; exiting\n", left);
  return 0;
}

}  // namespace mlaserve::cli
