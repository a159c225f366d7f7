// mlaserve serve: the HTTP server on one model, with SGLang's flag names. SIGTERM or SIGINT
// drains: new generations get 503, in-flight ones may finish within --drain-timeout, the rest
// are aborted (finish_reason "abort"), and the process exits 0.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/model_setup.h"
#include "engine/cpu_model_runner.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/gguf_model.h"
#include "server/api_server.h"
#include "server/http_server.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/unicode_version.h"

namespace mlaserve::cli {
namespace {

// Flags SGLang users may pass that mlaserve does not implement yet: refused, never ignored.
void RefuseUnimplemented(Args& args) {
  const char* hicache = "HiCache is not implemented";
  args.Refuse("enable-hierarchical-cache",
              "a host-memory KV tier (HiCache) is not implemented; it would only hold reusable prefixes, not add "
              "decode capacity (see mlaserve plan)");
  args.Refuse("hicache-size", hicache);
  args.Refuse("hicache-ratio", hicache);
  args.Refuse("hicache-write-policy", hicache);
  args.Refuse("enable-dp-attention", "data-parallel attention is not implemented");
  struct Parallelism {
    const char* flag;
    const char* alias;
    const char* what;
  };
  // (--tp-size is a model flag: cli/model_setup.h.)
  for (const Parallelism& p : {Parallelism{"dp-size", "dp", "data parallelism"}}) {
    for (const std::string name : {p.flag, p.alias}) {
      const std::string help =
          name == p.flag ? std::string(p.what) + ": only 1 (one CPU process)" : "same as --" + std::string(p.flag);
      const int n = args.Int(name, 1, help.c_str(), {.min = 1});
      if (n != 1) {
        args.Reject("--" + name + " " + std::to_string(n) +
                    " is not supported by mlaserve yet: it runs one CPU process (" + p.what + " 1)");
      }
    }
  }
  const std::string eviction = args.Str("radix-eviction-policy", "lru", "prefix-cache eviction: only lru");
  if (eviction != "lru") {
    args.Reject("--radix-eviction-policy " + eviction + " is not supported by mlaserve yet (lru only)");
  }
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

  ModelFlags model_flags = ReadModelFlags(args, ForwardSize::kEngineStep);
  EngineOptions engine_options = ReadEngineFlags(args, model_flags);
  HttpServerOptions http;
  http.host = args.Str("host", "127.0.0.1", "address to listen on");
  http.port = args.Int("port", 30000, "port to listen on; 0: an ephemeral port, printed in the log",
                       {.min = 0, .max = 65535});
  http.max_connections = args.Int("max-connections", 4096,
                                  "open client sockets (idle ones cost no thread); beyond, /health and /metrics "
                                  "are still answered and other requests get 503",
                                  {.min = 1});
  const std::string served_name_flag =
      args.Str("served-model-name", "", "the id in /v1/models", {.shown_default = "--model-path"});
  const std::string api_key = args.Str("api-key", "", "every endpoint but /health requires Authorization: Bearer KEY",
                                       {.value_name = "KEY"});
  const bool enable_metrics = args.Switch("enable-metrics", "serve Prometheus /metrics");
  const bool incremental_streaming_output = args.Switch(
      "incremental-streaming-output",
      "each streamed /generate event carries only what is new (text, output_ids, output logprobs), not the answer so far");
  const double drain_timeout_s = args.Double(
      "drain-timeout", 30.0, "seconds SIGTERM/SIGINT waits for in-flight requests", {.value_name = "S", .min = 0});
  const std::string chat_template_file = args.Str(
      "chat-template", "", "a Jinja chat template file to use instead of the model's",
      {.value_name = "FILE", .shown_default = "the model's chat_template.jinja or tokenizer_config.json chat_template"});
  const std::optional<std::string> reasoning_parser = args.OptStr(
      "reasoning-parser", "chat replies carry the model's reasoning in reasoning_content, apart from content",
      {.value_name = "NAME", .choices = {"deepseek-r1", "kimi"}});
  const std::optional<std::string> tool_call_parser = args.OptStr(
      "tool-call-parser", "the model's tool-call text becomes OpenAI tool_calls in chat replies to requests with tools",
      {.value_name = "NAME", .choices = {"deepseekv3", "kimi_k2"}});
  RefuseUnimplemented(args);
  if (model_flags.model_path.empty()) args.Reject("--model-path is required");
  if (auto exit_code = args.Finish()) return *exit_code;

  auto loaded = LoadModel(model_flags, /*need_tokenizer=*/true);
  if (!loaded.ok()) return Fail("serve", loaded.error());
  Log(LogLevel::kInfo, "%s", loaded->load_line.c_str());
  Model& model = *loaded->model;
  const ModelConfig& c = model.config();
  const std::string served_name = served_name_flag.empty() ? model_flags.model_path : served_name_flag;
  // Reported absolute (/get_model_info, /get_server_info): a client in another directory reads it.
  const std::string model_dir = std::filesystem::absolute(model_flags.model_path).lexically_normal().string();

  auto chat_template = ChatTemplate::ForModel(TokenizerPath(model_flags), chat_template_file, *loaded->tokenizer, c.model_type);
  if (!chat_template.ok()) return Fail("serve", chat_template.error());
  Log(LogLevel::kInfo, "[mlaserve] chat template: %s", chat_template->origin().c_str());
  Log(LogLevel::kInfo, "[mlaserve] tokenizer: Unicode %s (libpcre2 %s; tested with %s)",
      TokenizerUnicodeVersion().c_str(), Pcre2Version().c_str(), std::string(kTestedUnicodeVersion).c_str());

  auto kv = CreateEngineKv(*loaded, model_flags.page_size);
  if (!kv.ok()) return Fail("serve", kv.error());
  auto drafter = AttachDrafter(engine_options, *loaded, *kv);
  if (!drafter.ok()) return Fail("serve", drafter.error());
  Log(LogLevel::kInfo,
      "[mlaserve] model=%s (%s, %d layers), served_model_name=%s, kernels=%s, threads=%d, "
      "enable_deterministic_inference=%s",
      model_flags.model_path.c_str(), c.model_type.c_str(), c.num_hidden_layers, served_name.c_str(),
      loaded->kernels->name, model.pool().num_threads(), model_flags.options.deterministic ? "true" : "false");
  Log(LogLevel::kInfo, "[mlaserve] %s", loaded->kernel_choice.c_str());
  if (KvFormatUsesTensorScale(loaded->kv_cache.kv_format)) {
    Log(LogLevel::kInfo, "[mlaserve] kv scales: %s", loaded->kv_scales_source.c_str());
  }
  Log(LogLevel::kInfo, "[mlaserve] kv_cache_dtype=%s, %s", KvFormatName(loaded->kv_cache.kv_format),
      loaded->kv_budget.log_line.c_str());
  const double available_gb =
      (loaded->kv_budget.device_memory_bytes - double(model.weight_bytes()) - loaded->kv_budget.kv_bytes) / 1e9;
  Log(LogLevel::kInfo,
      "[mlaserve] max_total_num_tokens=%lld, chunked_prefill_size=%d, max_prefill_tokens=%d, "
      "max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB",
      (long long)kv->allocator->capacity_tokens(), engine_options.chunked_prefill_size,
      engine_options.max_prefill_tokens, engine_options.max_running_requests, model.max_context(),
      available_gb);

  CpuModelRunner runner(model, *loaded->kernels, *kv->storage);
  Engine engine(runner, *kv->allocator, engine_options, &*loaded->tokenizer);
  engine.Start();
  const bool draft_model_drafts =
      engine_options.speculative_algorithm == "NEXTN" || engine_options.speculative_algorithm == "EAGLE3";
  nlohmann::json info{{"model_path", model_dir},
                      {"served_model_name", served_name},
                      {"kv_cache_dtype", KvFormatName(loaded->kv_cache.kv_format)},
                      {"page_size", model_flags.page_size},
                      {"context_length", model.max_context()},
                      {"max_batch_tokens", model.max_batch_tokens()},
                      {"enable_deterministic_inference", model_flags.options.deterministic},
                      {"max_running_requests", engine_options.max_running_requests},
                      {"chunked_prefill_size", engine_options.chunked_prefill_size},
                      {"max_prefill_tokens", engine_options.max_prefill_tokens},
                      {"schedule_policy", engine_options.schedule_policy == SchedulePolicy::kLpm ? "lpm" : "fcfs"},
                      {"schedule_conservativeness", engine_options.schedule_conservativeness},
                      {"disable_radix_cache", engine_options.disable_radix_cache},
                      {"speculative_algorithm", engine_options.speculative()
                                                    ? nlohmann::json(engine_options.speculative_algorithm)
                                                    : nlohmann::json()},
                      // SGLang's meanings: NEXTN and EAGLE3 verify the last token and one draft per step.
                      {"speculative_num_steps",
                       draft_model_drafts ? nlohmann::json(engine_options.num_draft_tokens) : nlohmann::json()},
                      {"speculative_adaptive", engine_options.adaptive_drafts},
                      {"speculative_step_tuning", engine_options.tune_draft_steps},
                      {"speculative_num_draft_tokens", engine_options.num_draft_tokens + (draft_model_drafts ? 1 : 0)},
                      {"speculative_draft_model_path", engine_options.draft_model_path.empty()
                                                           ? nlohmann::json()
                                                           : nlohmann::json(engine_options.draft_model_path)},
                      {"enable_metrics", enable_metrics},
                      {"incremental_streaming_output", incremental_streaming_output},
                      {"reasoning_parser", reasoning_parser ? nlohmann::json(*reasoning_parser) : nlohmann::json()},
                      {"tool_call_parser", tool_call_parser ? nlohmann::json(*tool_call_parser) : nlohmann::json()},
                      {"tokenizer_unicode_version", TokenizerUnicodeVersion()},
                      {"host", http.host},
                      {"port", http.port}};
  // A GGUF tokenizer is served (GET /tokenizer_file) as the Hugging Face files it stands for,
  // built here once.
  std::optional<HfTokenizerFiles> gguf_tokenizer_files;
  if (IsGgufFile(TokenizerPath(model_flags))) {
    auto files = ReadGgufTokenizer(TokenizerPath(model_flags));
    if (!files.ok()) return Fail("serve", files.error());
    gguf_tokenizer_files = std::move(files).value();
  }
  ApiServer api(engine, *loaded->tokenizer, model,
                ApiServerOptions{.served_model_name = served_name,
                                 .model_path = model_dir,
                                 .tokenizer_path = std::filesystem::absolute(TokenizerPath(model_flags))
                                                       .lexically_normal()
                                                       .string(),
                                 .gguf_tokenizer_files = std::move(gguf_tokenizer_files),
                                 .api_key = api_key,
                                 .enable_metrics = enable_metrics,
                                 .server_info = info,
                                 .prefix_cache = !engine_options.disable_radix_cache,
                                 .incremental_streaming_output = incremental_streaming_output,
                                 .chat_template = std::move(chat_template).value(),
                                 .reasoning_parser = reasoning_parser ? std::optional(*chat::ReasoningFormatFromName(*reasoning_parser))
                                                                      : std::nullopt,
                                 .tool_call_parser = tool_call_parser ? std::optional(*chat::ToolCallFormatFromName(*tool_call_parser))
                                                                      : std::nullopt});
  auto server = HttpServer::Start(http, [&api](const HttpRequest& r, HttpResponseWriter& w) { api.Handle(r, w); });
  if (!server.ok()) {
    engine.Stop();
    return Fail("serve", server.error());
  }
  Log(LogLevel::kInfo, "[mlaserve] HTTP server listening on http://%s:%d", http.host.c_str(),
      (*server)->port());
  Log(LogLevel::kInfo, "The server is fired up and ready to roll!");

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  Log(LogLevel::kInfo, "[mlaserve] received %s: draining (new requests get 503; up to %.0f s for %d in flight)",
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
  Log(LogLevel::kInfo, "[mlaserve] drained: %d request(s) aborted at the drain timeout; exiting", left);
  return 0;
}

}  // namespace mlaserve::cli
