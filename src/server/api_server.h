// The HTTP API over the engine: OpenAI (/v1/completions, /v1/chat/completions, /v1/models) and
// SGLang-native (/generate, /health, /health_generate, /get_server_info, /get_model_info,
// /flush_cache, /abort_request), /metrics in Prometheus text, API-key checks, and the draining
// state used for graceful shutdown. Handlers run on the HTTP server's connection threads; each
// generation waits on its own OutputChannel and never holds a lock the engine needs.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "nlohmann/json.hpp"
#include "server/http_server.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {

struct ApiServerOptions {
  std::string served_model_name;
  std::string model_path;
  std::string api_key;          // empty: no authentication
  bool enable_metrics = false;
  nlohmann::json server_info;   // what /get_server_info reports (the effective flags)
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
  struct Generation;  // one request being driven (api_server.cc)

  void HandleGenerate(const nlohmann::json& body, HttpResponseWriter& writer);
  void HandleCompletions(const nlohmann::json& body, HttpResponseWriter& writer, bool chat);
  void HandleHealthGenerate(HttpResponseWriter& writer);

  // Submits `request` and calls on_output for every output until the finished one; aborts the
  // request when the client goes or on_output returns false. The error is for the client.
  Status Drive(GenerateRequest request, HttpResponseWriter& writer,
               const std::function<bool(const RequestOutput&)>& on_output);

  Engine& engine_;
  const Tokenizer& tokenizer_;
  const Model& model_;
  ApiServerOptions options_;
  ServerMetrics metrics_;
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<uint64_t> next_id_{1};
  std::string id_salt_;  // random per process: server-made ids are not guessable
};

}  // namespace mlaserve
