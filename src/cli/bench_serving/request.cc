// One bench-serving request: its body for each backend, sent and streamed, each event timed as
// SGLang's client times it (TTFT, ITL; token counts from the server when it reports them); and
// what the server says about itself (its model id, its vocabulary).
#include <algorithm>
#include <cstdio>

#include "cli/bench_serving/bench_serving.h"
#include "server/sse.h"

namespace mlaserve::cli::bench_serving {
namespace {

using json = nlohmann::json;

constexpr int kControlTimeoutMs = 10'000;        // /v1/models, /get_model_info
constexpr int kStreamIdleTimeoutMs = 3'600'000;  // a queued request may wait long for its first byte

std::string RequestBody(const ServingFlags& f, const std::string& model, const BenchRequest& r) {
  json body;
  switch (f.backend) {
    case Backend::kSglang:
      if (!r.input_ids.empty()) body["input_ids"] = r.input_ids;
      else body["text"] = r.text;
      body["sampling_params"] = {{"max_new_tokens", r.output_len}, {"temperature", 0.0}, {"ignore_eos", f.ignore_eos}};
      body["stream"] = true;
      break;
    case Backend::kOpenAi:
    case Backend::kOpenAiChat:
      body["model"] = model;
      if (f.backend == Backend::kOpenAi) body["prompt"] = r.text;
      else body["messages"] = json::array({{{"role", "user"}, {"content", r.text}}});
      body["max_tokens"] = r.output_len;
      body["temperature"] = 0.0;
      body["stream"] = true;
      body["stream_options"] = {{"include_usage", true}};
      body["ignore_eos"] = f.ignore_eos;  // SGLang's extension to the OpenAI API
      break;
  }
  return body.dump(-1, ' ', false, json::error_handler_t::replace);  // a bad --model byte must not throw
}

// What a server reported, leniently: the integer at `key`, or `fallback` when obj is not an
// object or the value is absent or not an integer (server/client_json.h's IntField, for client
// input, refuses those instead).
int IntOr(const json& obj, const char* key, int fallback) {
  if (!obj.is_object()) return fallback;
  auto it = obj.find(key);
  return it != obj.end() && it->is_number_integer() ? it->get<int>() : fallback;
}

// The text a streamed chunk adds: "text" (/generate), choices[0].text or choices[0].delta.content.
std::string ChunkText(Backend b, const json& chunk) {
  const json* holder = &chunk;
  const char* key = "text";
  if (b != Backend::kSglang) {
    auto choices = chunk.find("choices");
    if (choices == chunk.end() || !choices->is_array() || choices->empty()) return "";
    holder = &(*choices)[0];
    if (b == Backend::kOpenAiChat) {
      auto delta = holder->find("delta");
      if (delta == holder->end()) return "";
      holder = &*delta;
      key = "content";
    }
  }
  if (!holder->is_object()) return "";
  auto it = holder->find(key);
  return it != holder->end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

std::string EndpointPath(Backend b) {
  switch (b) {
    case Backend::kSglang: return "/generate";
    case Backend::kOpenAi: return "/v1/completions";
    case Backend::kOpenAiChat: return "/v1/chat/completions";
  }
  return "/generate";
}

RequestResult RunRequest(const HttpClient& client, const std::string& url, const HttpHeaders& headers,
                         const ServingFlags& f, const std::string& model, const BenchRequest& r) {
  RequestResult out;
  out.prompt_len = r.prompt_len_estimate;
  const std::string body = RequestBody(f, model, r);
  SseParser parser;
  int token_chunks = 0;
  int reported_output_len = -1;  // completion_tokens from the server, when it says
  int last_output_len = 0;
  bool done = false;
  const Clock::time_point start = Clock::now();
  Clock::time_point last_token_at = start;

  auto on_event = [&](const SseEvent& event) {
    if (done || !out.error.empty()) return;
    const Clock::time_point now = Clock::now();
    out.latency_s = std::chrono::duration<double>(now - start).count();
    if (event.data == "[DONE]") {
      done = true;
      return;
    }
    const json chunk = json::parse(event.data, nullptr, false);
    if (chunk.is_discarded() || !chunk.is_object()) {
      out.error = "bad JSON in the stream: " + event.data.substr(0, 200);
      return;
    }
    if (auto err = chunk.find("error"); err != chunk.end()) {
      const json& message = err->is_object() && err->contains("message") ? (*err)["message"] : *err;
      out.error = "server error: " + (message.is_string() ? message.get<std::string>() : message.dump());
      return;
    }
    // How many new tokens this chunk carries, as SGLang's client decides it: /generate by the
    // growth of meta_info.completion_tokens, the OpenAI endpoints by non-empty text.
    int new_tokens = 0;
    if (f.backend == Backend::kSglang) {
      const json meta = chunk.value("meta_info", json::object());
      out.prompt_len = IntOr(meta, "prompt_tokens", out.prompt_len);
      const int completion = IntOr(meta, "completion_tokens", -1);
      if (completion >= 0) {
        reported_output_len = completion;
        new_tokens = std::max(0, completion - last_output_len);
        last_output_len = std::max(last_output_len, completion);
      } else {
        new_tokens = ChunkText(f.backend, chunk).empty() ? 0 : 1;
      }
    } else {
      new_tokens = ChunkText(f.backend, chunk).empty() ? 0 : 1;
      if (auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
        out.prompt_len = IntOr(*usage, "prompt_tokens", out.prompt_len);
        reported_output_len = IntOr(*usage, "completion_tokens", reported_output_len);
      }
    }
    if (new_tokens == 0) return;
    const double gap_s = std::chrono::duration<double>(now - last_token_at).count();
    if (token_chunks == 0) {
      out.ttft_s = gap_s;
    } else if (f.backend == Backend::kSglang) {
      out.itl_s.insert(out.itl_s.end(), size_t(new_tokens), gap_s / new_tokens);
    } else {
      out.itl_s.push_back(gap_s);
    }
    ++token_chunks;
    last_token_at = now;
  };
  auto on_data = [&](std::string_view piece) {
    parser.Feed(piece, on_event);
    return !done && out.error.empty();
  };
  Status s = client.Stream("POST", url, body, headers, kStreamIdleTimeoutMs, on_data);
  if (out.latency_s == 0) out.latency_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (!s.ok()) out.error = s.message();
  if (out.error.empty() && token_chunks == 0) out.error = "the stream ended without any token";
  out.output_len = reported_output_len >= 0 ? reported_output_len : token_chunks;
  out.success = out.error.empty();
  return out;
}

Result<std::string> DiscoverModel(const HttpClient& client, const std::string& base_url, const HttpHeaders& headers) {
  auto response = client.Request("GET", base_url + "/v1/models", "", headers, kControlTimeoutMs);
  if (!response.ok()) return Status::Error("cannot ask " + base_url + " for its model: " + response.error());
  if (response->status_code == 200) {
    const json j = json::parse(response->body, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
        j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
      return j["data"][0]["id"].get<std::string>();
    }
  }
  std::fprintf(stderr, "bench-serving: no model id in %s/v1/models (HTTP %d); using \"default\"\n",
               base_url.c_str(), response->status_code);
  return std::string("default");
}

Result<int> DiscoverVocabSize(const HttpClient& client, const std::string& base_url, const HttpHeaders& headers) {
  auto response = client.Request("GET", base_url + "/get_model_info", "", headers, kControlTimeoutMs);
  if (!response.ok()) return Status::Error("cannot ask " + base_url + " for its vocabulary: " + response.error());
  if (response->status_code != 200) return 0;
  const json j = json::parse(response->body, nullptr, false);
  return j.is_discarded() ? 0 : std::max(0, IntOr(j, "vocab_size", 0));
}

}  // namespace mlaserve::cli::bench_serving
