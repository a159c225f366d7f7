#include "batch/http_generator.h"

#include <nlohmann/json.hpp>

#include "server/sse.h"

namespace mlaserve::batch {

using nlohmann::json;

int HttpStatusOf(const std::string& message) {
  if (message.rfind("HTTP ", 0) != 0 || message.size() < 8) return 0;
  const std::string code = message.substr(5, 3);
  for (char c : code) {
    if (c < '0' || c > '9') return 0;
  }
  return std::stoi(code);
}

namespace {

TurnError ErrorKindOf(int http_status) {
  if (http_status == 0 || http_status == 503) return TurnError::kInterrupted;
  if (http_status == 408 || http_status == 429 || http_status >= 500) return TurnError::kRetryable;
  return TurnError::kPermanent;
}

std::string FinishType(const json& meta) {
  if (!meta.is_object() || !meta.contains("finish_reason")) return "";
  const json& f = meta["finish_reason"];
  if (f.is_object()) return f.value("type", "");
  return f.is_string() ? f.get<std::string>() : "";
}

}  // namespace

Serving ServingOf(const EndpointInfo& endpoint) {
  return {.kv_cache_dtype = endpoint.kv_format,
          .model = !endpoint.served_model_name.empty() ? endpoint.served_model_name : endpoint.model_path,
          .server_id = endpoint.server_id};
}

HttpGenerator::HttpGenerator(EndpointPool& pool, const Tokenizer& tokenizer, double request_timeout_s,
                             std::string model)
    : pool_(pool), tokenizer_(tokenizer), request_timeout_s_(request_timeout_s), model_(std::move(model)) {}

// Only when every endpoint can continue: a request may land on any of them, and an
// OpenAI-only one would answer from scratch, which must not be glued onto the partial.
bool HttpGenerator::continues_partial() const { return pool_.all_native(); }

TurnOutcome HttpGenerator::Generate(const TurnRequest& request, OnTokens on_tokens) {
  if (request.captured != nullptr) {
    return {.error = TurnError::kPermanent, .message = "a server does not return hidden states"};
  }
  const size_t index = pool_.Acquire();
  const EndpointInfo endpoint = pool_.info(index);
  TurnOutcome out = endpoint.native ? Native(endpoint, request, on_tokens) : Chat(endpoint, request);
  out.serving = ServingOf(endpoint);
  const bool cancelled = request.cancel != nullptr && request.cancel->load();  // not the endpoint's doing
  pool_.Release(index, out.error != TurnError::kInterrupted || cancelled);
  return out;
}

TurnOutcome HttpGenerator::Native(const EndpointInfo& endpoint, const TurnRequest& request, OnTokens on_tokens) {
  const Serving serving = ServingOf(endpoint);
  json body{{"input_ids", request.input_ids},
            {"sampling_params",
             {{"max_new_tokens", request.max_new_tokens},
              {"temperature", request.temperature},
              {"top_p", request.top_p},
              {"seed", request.seed}}},
            {"stream", true},
            {"rid", request.rid}};
  TurnOutcome out;
  SseParser parser;
  bool finished = false;
  std::string stream_error;
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(request_timeout_s_));
  bool timed_out = false;
  auto on_event = [&](const SseEvent& event) {
    if (finished || !stream_error.empty() || event.data == "[DONE]") return;
    const json chunk = json::parse(event.data, nullptr, false);
    if (!chunk.is_object()) {
      stream_error = "bad JSON in the stream";
      return;
    }
    if (chunk.contains("error")) {
      stream_error = "server error: " + chunk["error"].dump();
      return;
    }
    if (chunk.contains("output_ids") && chunk["output_ids"].is_array()) {
      // Incremental servers send each chunk's new ids, cumulative ones everything so far.
      if (!endpoint.incremental_stream) out.new_ids.clear();
      for (const json& id : chunk["output_ids"]) out.new_ids.push_back(id.get<TokenId>());
      on_tokens(out.new_ids, serving);
    }
    const std::string type = FinishType(chunk.value("meta_info", json::object()));
    if (!type.empty()) {
      finished = true;
      out.finish_reason = type;
    }
  };
  auto on_data = [&](std::string_view piece) {
    parser.Feed(piece, on_event);
    if (Clock::now() > deadline) timed_out = true;
    const bool cancelled = request.cancel != nullptr && request.cancel->load();
    return !finished && stream_error.empty() && !timed_out && !cancelled;
  };
  const int idle_ms = int(request_timeout_s_ * 1000);
  const Status s = client_.Stream("POST", endpoint.base_url + "/generate", body.dump(), pool_.headers(), idle_ms, on_data);
  if (finished && out.finish_reason == "abort") {
    // The server aborted it (draining for a restart, or its engine stopped): keep the tokens.
    out.error = TurnError::kInterrupted;
    out.message = "aborted by the server";
  } else if (finished) {
    return out;
  } else if (timed_out) {
    out.error = TurnError::kRetryable;
    out.message = "request timed out after " + std::to_string(request_timeout_s_) + " s";
  } else if (!stream_error.empty()) {
    out.error = TurnError::kRetryable;
    out.message = stream_error;
  } else if (!s.ok()) {
    const int code = HttpStatusOf(s.message());
    out.error = ErrorKindOf(code);
    if (code == 0 && s.message().find("timed out") != std::string::npos) out.error = TurnError::kRetryable;
    out.message = s.message();
  } else {
    out.error = TurnError::kInterrupted;
    out.message = "the stream ended before the answer finished";
  }
  return out;
}

TurnOutcome HttpGenerator::Chat(const EndpointInfo& endpoint, const TurnRequest& request) {
  json messages = json::array();
  for (const ChatMessage& m : request.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
  const std::string model = !model_.empty() ? model_ : endpoint.served_model_name;
  json body{{"messages", messages},
            {"max_tokens", request.max_new_tokens},
            {"temperature", request.temperature},
            {"top_p", request.top_p},
            {"seed", request.seed},
            {"stream", false},
            // The answer as the model emitted it, reasoning included, as /generate gives it.
            {"separate_reasoning", false}};
  if (!model.empty()) body["model"] = model;
  TurnOutcome out;
  auto r = client_.Request("POST", endpoint.base_url + "/v1/chat/completions", body.dump(), pool_.headers(),
                           int(request_timeout_s_ * 1000));
  if (!r.ok()) {
    out.error = r.error().find("timed out") != std::string::npos ? TurnError::kRetryable : TurnError::kInterrupted;
    out.message = r.error();
    return out;
  }
  if (r->status_code != 200) {
    out.error = ErrorKindOf(r->status_code);
    out.message = "HTTP " + std::to_string(r->status_code) + ": " + r->body.substr(0, 200);
    return out;
  }
  const json j = json::parse(r->body, nullptr, false);
  if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) {
    out.error = TurnError::kRetryable;
    out.message = "chat completion without choices";
    return out;
  }
  const json& choice = j["choices"][0];
  const json message = choice.value("message", json::object());
  const std::string text =
      message.is_object() && message.contains("content") && message["content"].is_string() ? message["content"].get<std::string>() : "";
  if (message.is_object() && message.contains("reasoning_content") && message["reasoning_content"].is_string() &&
      !message["reasoning_content"].get_ref<const std::string&>().empty()) {
    out.error = TurnError::kPermanent;
    out.message = "the server split the reasoning off the answer (reasoning_content) despite \"separate_reasoning\": "
                  "false; the text as the model emitted it is not available";
    return out;
  }
  auto ids = tokenizer_.Encode(text, /*add_bos=*/false);
  if (!ids.ok()) {
    out.error = TurnError::kPermanent;
    out.message = ids.error();
    return out;
  }
  out.new_ids = std::move(ids).value();
  out.finish_reason = choice.contains("finish_reason") && choice["finish_reason"].is_string()
                          ? choice["finish_reason"].get<std::string>() : "stop";
  if (out.finish_reason == "abort") {
    out.error = TurnError::kInterrupted;
    out.message = "aborted by the server";
  }
  return out;
}

}  // namespace mlaserve::batch
