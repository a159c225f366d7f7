// The HTTP API over the engine: OpenAI (/v1/completions, /v1/chat/completions, /v1/models) and
// SGLang-native (/generate, /health, /health_generate, /get_server_info, /get_model_info,
// /flush_cache, /abort_request), /metrics in Prometheus text, the live dashboard (/dashboard,
// /dashboard/data: server/dashboard.h), API-key checks, and the draining
// state used for graceful shutdown. Handlers run on the HTTP server's connection threads; each
// generation waits on its own OutputChannel and never holds a lock the engine needs.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/reasoning_parser.h"
#include "chat/tool_call_parser.h"
#include "engine/engine.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/recent_latencies.h"
#include "server/request_board.h"
#include "server/openai_request.h"
#include "server/request_builder.h"
#include "server/response_ids.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {

struct ApiServerOptions {
  std::string served_model_name;
  std::string model_path;
  std::string tokenizer_path;   // a directory or a GGUF file (--tokenizer-path, else model_path)
  // A GGUF file's tokenizer as the Hugging Face files /tokenizer_file serves, built once at
  // start-up (unset: the files are read from the tokenizer_path directory).
  std::optional<HfTokenizerFiles> gguf_tokenizer_files;
  std::string api_key;          // empty: no authentication
  bool enable_metrics = false;
  nlohmann::json server_info;   // what /get_server_info reports (the effective flags)
  bool prefix_cache = true;     // the engine has a radix prefix cache (n > 1 samples share it)
  // --incremental-streaming-output: each /generate stream event carries only the text, output_ids
  // and output logprob entries new since the previous one (SGLang's disjoint segments).
  bool incremental_streaming_output = false;
  // The model's chat template (ChatTemplate::ForModel); unset: the built-in format for the
  // tokenizer (ChatFormatFor).
  std::optional<ChatTemplate> chat_template;
  // --reasoning-parser: chat replies carry reasoning_content apart from content (unless a
  // request says "separate_reasoning": false). Unset: the reply is all content.
  std::optional<chat::ReasoningFormat> reasoning_parser;
  // --tool-call-parser: the model's tool-call text in a reply to a request with `tools` becomes
  // OpenAI tool_calls. Unset: tools still reach the template, and the reply stays text.
  std::optional<chat::ToolCallFormat> tool_call_parser;
};

class ApiServer {
 public:
  // engine, tokenizer and model must outlive the ApiServer.
  ApiServer(Engine& engine, const Tokenizer& tokenizer, const Model& model, ApiServerOptions options);

  // The HttpServer's handler.
  void Handle(const HttpRequest& request, HttpResponseWriter& writer);

  // Graceful drain: from now on new generations get 503.
  void StartDraining() { draining_.store(true); }
  int in_flight() const { return in_flight_.load(); }

 private:
  void HandleGenerate(const nlohmann::json& body, HttpResponseWriter& writer);  // native_api.cc
  void HandleCompletions(const nlohmann::json& body, HttpResponseWriter& writer);  // openai_completions.cc
  // raw_body: the body as sent (already parsed into `body`); chat templates see the client's
  // key order of `tools` and `chat_template_kwargs` (a template's tojson writes it).
  void HandleChat(const nlohmann::json& body, std::string_view raw_body, HttpResponseWriter& writer);  // openai_chat.cc
  // openai_response.cc: false when `model` names another model (the error is sent).
  bool CheckServedModel(const nlohmann::json& body, HttpResponseWriter& writer);
  // openai_response.cc: generates n samples of each prompt and answers in OpenAI's shape for
  // `endpoint` (fields already read; format: how a chat reply is split).
  void RespondOpenAi(const nlohmann::json& body, OpenAiEndpoint endpoint, const OpenAiFields& fields,
                     std::vector<OpenAiPrompt> prompts, ChatReplyFormat format, HttpResponseWriter& writer);
  void HandleHealthGenerate(HttpResponseWriter& writer);

  // Submits every request and calls on_output(index into requests, output) for each output,
  // in each request's order, until every request has finished; aborts all of them when the
  // client goes or on_output returns false (their last outputs are still delivered). If the
  // engine refuses one, those already submitted are aborted and its error is returned, for the
  // client; on_output has then not been called.
  // internal: the server's own requests (n > 1 prefill, /health_generate), left out of the
  // latency histograms.
  Status Drive(std::vector<GenerateRequest> requests, HttpResponseWriter& writer,
               const std::function<bool(size_t, const RequestOutput&)>& on_output, bool internal = false);
  // Appends n samples of `prompt` to `out`, sample j with rid_of(j). For n > 1 the prompt is
  // first run once (max_new_tokens 0) so that the samples find it in the prefix cache instead
  // of each computing it; with a seed, sample 0 draws as the same request with n = 1 would and
  // sample j with seed + j * 0x9E3779B97F4A7C15 (mod 2^64).
  void AppendSamples(const GenerateRequest& prompt, int n, const std::function<std::string(int)>& rid_of,
                     std::vector<GenerateRequest>& out, HttpResponseWriter& writer);

  Engine& engine_;
  const Tokenizer& tokenizer_;
  const Model& model_;
  ApiServerOptions options_;
  ChatTemplate chat_template_;  // renders /v1/chat/completions messages
  ServerMetrics metrics_;
  // The dashboard's sources beside the engine's stats (server/dashboard.h).
  RequestBoard board_;
  RecentLatencies recent_latencies_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  ResponseIds response_ids_;  // OpenAI responses in flight, for /abort_request by their id
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
};

}  // namespace mlaserve
