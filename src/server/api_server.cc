#include "server/api_server.h"

#include <chrono>
#include <cstdio>
#include <random>
#include <cmath>
#include <ctime>

#include "server/output_channel.h"
#include "server/sampling_json.h"
#include "tokenizer/chat_template.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void SendJson(HttpResponseWriter& w, int status, const json& j) {
  w.Send(status, "application/json", Dump(j));
}

void SendError(HttpResponseWriter& w, int status, const std::string& message,
               const char* type = "invalid_request_error") {
  w.Send(status, "application/json", JsonError(status, message, type));
}

bool WriteEvent(HttpResponseWriter& w, const json& j) { return w.Write("data: " + Dump(j) + "\n\n"); }

// Typed optional fields of client JSON (json::value would throw on a mismatched type).
Result<bool> BoolField(const json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) return Status::Error(std::string("'") + key + "' must be true or false");
  return j[key].get<bool>();
}

// A JSON integer as a token id, without wrapping: anything outside int32 becomes -1, which the
// engine rejects as outside the vocabulary.
TokenId TokenIdFromJson(const json& id) {
  if (id.is_number_unsigned()) return id.get<uint64_t>() > uint64_t(INT32_MAX) ? -1 : TokenId(id.get<uint64_t>());
  const int64_t v = id.get<int64_t>();
  return v < 0 || v > INT32_MAX ? -1 : TokenId(v);
}

Result<int> IntField(const json& j, const char* key, int fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer()) return Status::Error(std::string("'") + key + "' must be an integer");
  const int64_t v = j[key].get<int64_t>();
  if (v < -(int64_t(1) << 30) || v > (int64_t(1) << 30)) return Status::Error(std::string("'") + key + "' is out of range");
  return int(v);
}

int64_t UnixTime() { return int64_t(std::time(nullptr)); }

json FinishReasonNative(const RequestOutput& o, int max_new_tokens) {
  switch (o.finish_reason) {
    case FinishReason::kStop:
      if (!o.matched_stop_string.empty()) return {{"type", "stop"}, {"matched", o.matched_stop_string}};
      return {{"type", "stop"}, {"matched", o.matched_stop_token}};
    case FinishReason::kLength: return {{"type", "length"}, {"length", max_new_tokens}};
    case FinishReason::kAbort: return {{"type", "abort"}, {"message", o.error}};
    case FinishReason::kNone: break;
  }
  return nullptr;
}

// OpenAI's finish_reason: "stop", "length", or "abort" (SGLang's extension) .
json FinishReasonOpenAi(const RequestOutput& o) {
  if (!o.finished) return nullptr;
  return FinishReasonName(o.finish_reason);
}

}  // namespace

ApiServer::ApiServer(Engine& engine, const Tokenizer& tokenizer, const Model& model, ApiServerOptions options)
    : engine_(engine),
      tokenizer_(tokenizer),
      model_(model),
      options_(std::move(options)),
      metrics_(options_.served_model_name) {
  std::random_device random;
  char salt[17];
  std::snprintf(salt, sizeof salt, "%08x%08x", random(), random());
  id_salt_ = salt;
}

// ---- routing -----------------------------------------------------------------------------------

void ApiServer::Handle(const HttpRequest& req, HttpResponseWriter& w) {
  if (!options_.api_key.empty() && req.path != "/health") {
    const std::string* auth = req.Header("authorization");
    if (auth == nullptr || *auth != "Bearer " + options_.api_key) {
      return SendError(w, 401, "invalid or missing API key (Authorization: Bearer KEY)", "authentication_error");
    }
  }
  const std::string& p = req.path;
  const bool get = req.method == "GET", post = req.method == "POST";
  auto method_not_allowed = [&] { SendError(w, 405, "method " + req.method + " is not allowed for " + p); };

  if (p == "/health") {
    if (!get) return method_not_allowed();
    if (draining_.load()) return SendError(w, 503, "the server is shutting down", "service_unavailable");
    return w.Send(200, "text/plain", "");
  }
  if (p == "/health_generate") {
    if (!get) return method_not_allowed();
    return HandleHealthGenerate(w);
  }
  if (p == "/metrics") {
    if (!options_.enable_metrics) return SendError(w, 404, "metrics are off (start the server with --enable-metrics)", "not_found_error");
    return w.Send(200, "text/plain; version=0.0.4", metrics_.Render(engine_.stats()));
  }
  if (p == "/v1/models") {
    if (!get) return method_not_allowed();
    json model{{"id", options_.served_model_name}, {"object", "model"}, {"created", UnixTime()},
               {"owned_by", "mlaserve"}, {"root", options_.served_model_name},
               {"max_model_len", model_.max_context()}};
    return SendJson(w, 200, {{"object", "list"}, {"data", json::array({model})}});
  }
  if (p == "/get_model_info") {
    return SendJson(w, 200, {{"model_path", options_.model_path},
                             {"tokenizer_path", options_.model_path},
                             {"is_generation", true},
                             {"served_model_name", options_.served_model_name},
                             {"model_type", model_.config().model_type},
                             {"vocab_size", model_.config().vocab_size},
                             {"max_context_length", model_.max_context()}});
  }
  if (p == "/get_server_info") {
    json info = options_.server_info;
    const EngineStatsSnapshot s = engine_.stats();
    info["max_total_num_tokens"] = s.max_total_num_tokens;
    info["num_running_reqs"] = s.num_running_reqs;
    info["num_queue_reqs"] = s.num_queue_reqs;
    info["token_usage"] = s.token_usage;
    info["version"] = "mlaserve-0.1";
    return SendJson(w, 200, info);
  }
  if (p == "/flush_cache") {
    if (!get && !post) return method_not_allowed();
    // Waits for the engine thread. SGLang's status codes and wording (200 "Cache flushed.", 400
    // while requests are pending), with the numbers: what was freed, or what is pending and stays.
    const Result<FlushCacheResult> r = engine_.FlushCache();
    if (!r.ok()) return SendError(w, 503, r.error(), "service_unavailable");
    if (r->flushed) {
      return w.Send(200, "text/plain", "Cache flushed. Freed " + std::to_string(r->freed_tokens) + " cached tokens.\n");
    }
    return w.Send(400, "text/plain",
                  "Cache not flushed because there are pending requests. #queue-req: " +
                      std::to_string(r->num_queue_reqs) + ", #running-req: " + std::to_string(r->num_running_reqs) +
                      ". Nothing was freed: " + std::to_string(r->cached_tokens) + " cached tokens stay, " +
                      std::to_string(r->locked_tokens) + " of them in use by running requests.\n");
  }
  if (!post && (p == "/generate" || p == "/v1/completions" || p == "/v1/chat/completions" || p == "/abort_request")) {
    return method_not_allowed();
  }
  if (p != "/generate" && p != "/v1/completions" && p != "/v1/chat/completions" && p != "/abort_request") {
    return SendError(w, 404, "no route for " + req.method + " " + p, "not_found_error");
  }
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return SendError(w, 400, "the request body is not valid JSON (or not valid UTF-8)");
  if (!body.is_object()) return SendError(w, 400, "the request body must be a JSON object");
  if (p == "/abort_request") {
    if (!body.contains("rid") || !body["rid"].is_string()) return SendError(w, 400, "'rid' (a string) is required");
    engine_.Abort(body["rid"].get<std::string>());
    return w.Send(200, "application/json", "{}");
  }
  // Counted before the draining check, so shutdown never misses a request between the two.
  in_flight_.fetch_add(1);
  struct Done {
    std::atomic<int>& n;
    ~Done() { n.fetch_sub(1); }
  } done{in_flight_};
  if (draining_.load()) return SendError(w, 503, "the server is shutting down", "service_unavailable");
  if (p == "/generate") return HandleGenerate(body, w);
  return HandleCompletions(body, w, /*chat=*/p == "/v1/chat/completions");
}

// ---- driving one generation ------------------------------------------------------------------

Status ApiServer::Drive(GenerateRequest request, HttpResponseWriter& w,
                        const std::function<bool(const RequestOutput&)>& on_output) {
  const std::string rid = request.rid;
  auto channel = std::make_shared<OutputChannel>();
  MLA_RETURN_IF_ERROR(engine_.Submit(std::move(request), [channel](RequestOutput&& o) { channel->Push(std::move(o)); }));
  bool aborted = false;
  bool finished = false;
  // If building a response throws, the generation must not run on without a consumer.
  struct AbortUnlessFinished {
    Engine& engine;
    const std::string& rid;
    const bool& finished;
    ~AbortUnlessFinished() {
      if (!finished) engine.Abort(rid);
    }
  } guard{engine_, rid, finished};
  std::optional<Clock::time_point> last_token;
  Clock::time_point next_client_check = Clock::now();
  for (;;) {
    std::optional<RequestOutput> o = channel->Pop(std::chrono::milliseconds(50));
    // Poll the client every 50 ms whether or not outputs keep coming (fast steps would
    // otherwise never leave time to notice a client that left a non-streaming request).
    if (!aborted && Clock::now() >= next_client_check) {
      next_client_check = Clock::now() + std::chrono::milliseconds(50);
      if (w.ClientGone()) {
        engine_.Abort(rid);  // the client left: free its KV now; keep reading until the last chunk
        aborted = true;
      }
    }
    if (!o) continue;
    if (!o->new_token_ids.empty()) {
      const Clock::time_point now = Clock::now();
      if (last_token) metrics_.ObserveInterTokenLatency(std::chrono::duration<double>(now - *last_token).count());
      last_token = now;
    }
    if (!aborted && !on_output(*o)) {
      engine_.Abort(rid);
      aborted = true;
    }
    if (o->finished) {
      finished = true;
      metrics_.ObserveRequest(o->queue_time_s, o->ttft_s, o->e2e_latency_s, o->completion_tokens);
      return Status::Ok();
    }
  }
}

// ---- SGLang native /generate ---------------------------------------------------------------------

void ApiServer::HandleGenerate(const json& body, HttpResponseWriter& w) {
  GenerateRequest req;
  const bool has_text = body.contains("text") && !body["text"].is_null();
  const bool has_ids = body.contains("input_ids") && !body["input_ids"].is_null();
  if (has_text == has_ids) return SendError(w, 400, "give exactly one of 'text' or 'input_ids'");
  if (has_text) {
    if (!body["text"].is_string()) return SendError(w, 400, "'text' must be a string (batched lists are not supported)");
    const std::string text = body["text"].get<std::string>();
    if (text.empty()) return SendError(w, 400, "'text' is empty");
    auto ids = tokenizer_.Encode(text, tokenizer_.add_bos());
    if (!ids.ok()) return SendError(w, 400, ids.error());
    req.input_ids = std::move(ids).value();
  } else {
    if (!body["input_ids"].is_array()) return SendError(w, 400, "'input_ids' must be a list of token ids");
    for (const json& id : body["input_ids"]) {
      if (!id.is_number_integer()) return SendError(w, 400, "'input_ids' must be a list of token ids");
      req.input_ids.push_back(TokenIdFromJson(id));
    }
  }
  auto sampling = SamplingFromNative(body.contains("sampling_params") ? body["sampling_params"] : json());
  if (!sampling.ok()) return SendError(w, 400, sampling.error());
  req.sampling = std::move(sampling).value();
  if (body.contains("rid")) {
    if (!body["rid"].is_string()) return SendError(w, 400, "'rid' must be a string");
    req.rid = body["rid"].get<std::string>();
  } else {
    req.rid = "gen-" + id_salt_ + "-" + std::to_string(next_id_.fetch_add(1));
  }
  const auto stream_field = BoolField(body, "stream", false);
  const auto return_logprob = BoolField(body, "return_logprob", false);
  const auto top_logprobs_num = IntField(body, "top_logprobs_num", 0);
  for (const Status* st : {&stream_field.status(), &return_logprob.status(), &top_logprobs_num.status()}) {
    if (!st->ok()) return SendError(w, 400, st->message());
  }
  const bool stream = *stream_field;
  req.sampling.return_logprob = *return_logprob;
  req.sampling.top_logprobs_num = *top_logprobs_num;
  if (body.contains("logprob_start_len") && !body["logprob_start_len"].is_null()) {
    if (!body["logprob_start_len"].is_number_integer()) return SendError(w, 400, "'logprob_start_len' must be an integer");
    const int64_t start = body["logprob_start_len"].get<int64_t>();
    if (start >= 0 && req.sampling.return_logprob) req.logprob_start_len = int(std::min<int64_t>(start, 1 << 30));
  }
  const int max_new = req.sampling.max_new_tokens;
  const int req_top_logprobs = req.sampling.top_logprobs_num;
  const bool want_logprobs = req.sampling.return_logprob;
  const std::string rid = req.rid;

  std::string text;
  json output_ids = json::array(), logprobs = json::array(), top_logprobs = json::array();
  json input_logprobs, input_top_logprobs;
  bool started = false, client_ok = true;
  auto meta = [&](const RequestOutput& o) {
    json m{{"id", rid}, {"finish_reason", FinishReasonNative(o, max_new)}, {"prompt_tokens", o.prompt_tokens},
           {"completion_tokens", o.completion_tokens}, {"cached_tokens", o.cached_tokens},
           {"e2e_latency", o.e2e_latency_s}};
    if (want_logprobs) {
      m["output_token_logprobs"] = logprobs;
      if (!top_logprobs.empty()) m["output_top_logprobs"] = top_logprobs;
      if (!input_logprobs.is_null()) m["input_token_logprobs"] = input_logprobs;
      if (!input_top_logprobs.is_null()) m["input_top_logprobs"] = input_top_logprobs;
    }
    return m;
  };
  const Status s = Drive(std::move(req), w, [&](const RequestOutput& o) {
    text += o.new_text;
    if (!o.input_token_ids.empty()) {
      // SGLang's shape: [logprob or null, token id, null], from logprob_start_len on.
      input_logprobs = json::array();
      for (size_t i = 0; i < o.input_token_ids.size(); ++i) {
        const float lp = i < o.input_token_logprobs.size() ? o.input_token_logprobs[i] : NAN;
        input_logprobs.push_back(json::array({std::isnan(lp) ? json() : json(lp), o.input_token_ids[i], nullptr}));
      }
      if (req_top_logprobs > 0) {
        input_top_logprobs = json::array();
        for (const auto& top : o.input_top_logprobs) {
          json entry = json::array();
          for (const TokenLogprob& t : top) entry.push_back(json::array({t.logprob, t.token, nullptr}));
          input_top_logprobs.push_back(top.empty() ? json() : entry);
        }
      }
    }
    for (size_t i = 0; i < o.new_token_ids.size(); ++i) {
      output_ids.push_back(o.new_token_ids[i]);
      if (i < o.new_token_logprobs.size()) logprobs.push_back(json::array({o.new_token_logprobs[i], o.new_token_ids[i], nullptr}));
      if (i < o.new_top_logprobs.size()) {
        json top = json::array();
        for (const TokenLogprob& t : o.new_top_logprobs[i]) top.push_back(json::array({t.logprob, t.token, nullptr}));
        top_logprobs.push_back(top);
      }
    }
    if (!stream) {
      if (o.finished) SendJson(w, 200, {{"text", text}, {"output_ids", output_ids}, {"meta_info", meta(o)}});
      return true;
    }
    if (!started) {
      w.BeginStream(200, "text/event-stream");
      started = true;
    }
    client_ok = WriteEvent(w, {{"text", text}, {"output_ids", output_ids}, {"meta_info", meta(o)}});
    if (o.finished && client_ok) {
      w.Write("data: [DONE]\n\n");
      w.EndStream();
    }
    return client_ok;
  });
  if (!s.ok()) {
    return draining_.load() ? SendError(w, 503, s.message(), "service_unavailable") : SendError(w, 400, s.message());
  }
}

// ---- OpenAI /v1/completions and /v1/chat/completions -------------------------------------------

void ApiServer::HandleCompletions(const json& body, HttpResponseWriter& w, bool chat) {
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) return SendError(w, 400, "'model' must be a string");
    const std::string name = body["model"].get<std::string>();
    if (name != options_.served_model_name && name != options_.model_path) {
      return SendError(w, 404, "The model '" + name + "' does not exist (this server serves '" +
                                   options_.served_model_name + "')", "not_found_error");
    }
  }
  GenerateRequest req;
  if (chat) {
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty()) {
      return SendError(w, 400, "'messages' must be a non-empty list");
    }
    std::vector<ChatMessage> messages;
    for (const json& m : body["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        return SendError(w, 400, "each message needs a 'role' string");
      }
      ChatMessage msg{m["role"].get<std::string>(), ""};
      const json content = m.contains("content") ? m["content"] : json();
      if (content.is_string()) {
        msg.content = content.get<std::string>();
      } else if (content.is_array()) {
        for (const json& part : content) {
          if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
              !part["text"].is_string()) {
            return SendError(w, 400, "only text content parts are supported");
          }
          msg.content += part["text"].get<std::string>();
        }
      } else if (!content.is_null()) {
        return SendError(w, 400, "message 'content' must be a string or a list of text parts");
      }
      messages.push_back(std::move(msg));
    }
    auto prompt = ApplyChatTemplate(ChatFormatFor(tokenizer_, model_.config().model_type), messages, true);
    if (!prompt.ok()) return SendError(w, 400, prompt.error());
    auto ids = tokenizer_.Encode(*prompt, /*add_bos=*/false);
    if (!ids.ok()) return SendError(w, 400, ids.error());
    req.input_ids = std::move(ids).value();
  } else {
    if (!body.contains("prompt") || body["prompt"].is_null()) return SendError(w, 400, "'prompt' is required");
    json prompt = body["prompt"];
    if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) prompt = prompt[0];
    if (prompt.is_string()) {
      if (prompt.get<std::string>().empty()) return SendError(w, 400, "'prompt' is empty");
      auto ids = tokenizer_.Encode(prompt.get<std::string>(), tokenizer_.add_bos());
      if (!ids.ok()) return SendError(w, 400, ids.error());
      req.input_ids = std::move(ids).value();
    } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
      for (const json& id : prompt) {
        if (!id.is_number_integer()) return SendError(w, 400, "'prompt' as token ids must be a list of integers");
        req.input_ids.push_back(TokenIdFromJson(id));
      }
    } else {
      return SendError(w, 400, "'prompt' must be a string or a list of token ids (one prompt per request)");
    }
    const auto echo = BoolField(body, "echo", false);
    if (!echo.ok()) return SendError(w, 400, echo.error());
    if (*echo) return SendError(w, 400, "'echo' is not supported");
  }
  const int remaining = std::max(1, model_.max_context() - int(req.input_ids.size()));
  auto sampling = SamplingFromOpenAi(body, chat ? std::min(remaining, 4096) : 16);
  if (!sampling.ok()) return SendError(w, 400, sampling.error());
  req.sampling = std::move(sampling).value();
  // Logprobs: completions take an int (top-N); chat takes a bool plus top_logprobs.
  if (chat) {
    if (body.contains("logprobs") && !body["logprobs"].is_null() && !body["logprobs"].is_boolean()) {
      return SendError(w, 400, "'logprobs' must be true or false");
    }
    req.sampling.return_logprob = body.contains("logprobs") && body["logprobs"].is_boolean() && body["logprobs"].get<bool>();
    if (body.contains("top_logprobs") && !body["top_logprobs"].is_null()) {
      const auto top = IntField(body, "top_logprobs", 0);
      if (!top.ok()) return SendError(w, 400, top.error());
      req.sampling.top_logprobs_num = *top;
    }
  } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    const auto top = IntField(body, "logprobs", 0);
    if (!top.ok()) return SendError(w, 400, top.error());
    req.sampling.return_logprob = true;
    req.sampling.top_logprobs_num = *top;
  }
  const auto stream_field = BoolField(body, "stream", false);
  if (!stream_field.ok()) return SendError(w, 400, stream_field.error());
  const bool stream = *stream_field;
  bool include_usage = false;
  if (stream && body.contains("stream_options") && body["stream_options"].is_object()) {
    const auto usage_field = BoolField(body["stream_options"], "include_usage", false);
    if (!usage_field.ok()) return SendError(w, 400, usage_field.error());
    include_usage = *usage_field;
  }
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + id_salt_ + "-" + std::to_string(next_id_.fetch_add(1));
  req.rid = id;
  const int64_t created = UnixTime();
  const std::string object = chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";

  std::string text;
  json lp_tokens = json::array(), lp_values = json::array(), lp_top = json::array(), lp_content = json::array();
  auto add_logprobs = [&](const RequestOutput& o, json& chunk_lp) {
    for (size_t i = 0; i < o.new_token_logprobs.size() && i < o.new_token_ids.size(); ++i) {
      const TokenId t = o.new_token_ids[i];
      const std::string token = tokenizer_.Decode(std::span(&t, 1));
      const std::string_view raw = tokenizer_.TokenBytes(t);
      json top_map = json::object(), top_list = json::array();
      if (i < o.new_top_logprobs.size()) {
        for (const TokenLogprob& tl : o.new_top_logprobs[i]) {
          const std::string s = tokenizer_.Decode(std::span(&tl.token, 1));
          top_map[s] = tl.logprob;
          const std::string_view b = tokenizer_.TokenBytes(tl.token);
          top_list.push_back({{"token", s}, {"logprob", tl.logprob}, {"bytes", std::vector<uint8_t>(b.begin(), b.end())}});
        }
      }
      if (chat) {
        chunk_lp.push_back({{"token", token}, {"logprob", o.new_token_logprobs[i]},
                            {"bytes", std::vector<uint8_t>(raw.begin(), raw.end())}, {"top_logprobs", top_list}});
      } else {
        chunk_lp["tokens"].push_back(token);
        chunk_lp["token_logprobs"].push_back(o.new_token_logprobs[i]);
        chunk_lp["top_logprobs"].push_back(top_map);
      }
    }
  };
  auto usage = [&](const RequestOutput& o) {
    return json{{"prompt_tokens", o.prompt_tokens}, {"completion_tokens", o.completion_tokens},
                {"total_tokens", o.prompt_tokens + o.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
  };
  bool started = false;
  json all_lp = chat ? json::array() : json{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}};
  const bool want_lp = req.sampling.return_logprob;
  // Streaming: logprobs of tokens whose text is still held back (a split UTF-8 character, a
  // possible stop string) wait for the next event that carries text.
  RequestOutput held_lp;
  const Status s = Drive(std::move(req), w, [&](const RequestOutput& o) {
    if (!stream) {
      text += o.new_text;
      if (want_lp) add_logprobs(o, all_lp);
      if (!o.finished) return true;
      json choice{{"index", 0}, {"finish_reason", FinishReasonOpenAi(o)}};
      if (chat) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
        choice["logprobs"] = want_lp ? json{{"content", all_lp}} : json();
      } else {
        choice["text"] = text;
        choice["logprobs"] = want_lp ? all_lp : json();
      }
      SendJson(w, 200, {{"id", id}, {"object", object}, {"created", created}, {"model", options_.served_model_name},
                        {"choices", json::array({choice})}, {"usage", usage(o)}});
      return true;
    }
    if (!started) {
      w.BeginStream(200, "text/event-stream");
      started = true;
      if (chat) {
        json first{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
        if (!WriteEvent(w, {{"id", id}, {"object", object}, {"created", created}, {"model", options_.served_model_name},
                            {"choices", json::array({first})}})) {
          return false;
        }
      }
    }
    if (want_lp) {
      held_lp.new_token_ids.insert(held_lp.new_token_ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      held_lp.new_token_logprobs.insert(held_lp.new_token_logprobs.end(), o.new_token_logprobs.begin(), o.new_token_logprobs.end());
      held_lp.new_top_logprobs.insert(held_lp.new_top_logprobs.end(), o.new_top_logprobs.begin(), o.new_top_logprobs.end());
    }
    if (!o.new_text.empty() || o.finished) {
      json chunk_lp = chat ? json::array() : json{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}};
      if (want_lp) {
        add_logprobs(held_lp, chunk_lp);
        held_lp = RequestOutput{};
      }
      json choice{{"index", 0}, {"finish_reason", FinishReasonOpenAi(o)}};
      if (chat) {
        choice["delta"] = o.new_text.empty() ? json::object() : json{{"content", o.new_text}};
        choice["logprobs"] = want_lp ? json{{"content", chunk_lp}} : json();
      } else {
        choice["text"] = o.new_text;
        choice["logprobs"] = want_lp ? chunk_lp : json();
      }
      if (!WriteEvent(w, {{"id", id}, {"object", object}, {"created", created}, {"model", options_.served_model_name},
                          {"choices", json::array({choice})}})) {
        return false;
      }
    }
    if (o.finished) {
      if (include_usage &&
          !WriteEvent(w, {{"id", id}, {"object", object}, {"created", created}, {"model", options_.served_model_name},
                          {"choices", json::array()}, {"usage", usage(o)}})) {
        return false;
      }
      w.Write("data: [DONE]\n\n");
      w.EndStream();
    }
    return true;
  });
  if (!s.ok()) {
    return draining_.load() ? SendError(w, 503, s.message(), "service_unavailable") : SendError(w, 400, s.message());
  }
}

void ApiServer::HandleHealthGenerate(HttpResponseWriter& w) {
  if (draining_.load()) return SendError(w, 503, "the server is shutting down", "service_unavailable");
  GenerateRequest req;
  req.rid = "health-" + id_salt_ + "-" + std::to_string(next_id_.fetch_add(1));
  req.input_ids = {tokenizer_.bos_id().value_or(0)};
  req.sampling.max_new_tokens = 1;
  req.sampling.temperature = 0;
  bool ok = false;
  const Status s = Drive(std::move(req), w, [&](const RequestOutput& o) {
    if (o.finished) ok = o.finish_reason != FinishReason::kAbort;
    return true;
  });
  if (!s.ok() || !ok) return SendError(w, 503, "health check generation failed: " + s.message(), "service_unavailable");
  w.Send(200, "text/plain", "");
}

}  // namespace mlaserve
