#include "server/api_server.h"


#include <algorithm>
#include <chrono>
#include <ctime>
#include <optional>

#include "core/read_file.h"
#include "server/api_json.h"
#include "server/client_json.h"
#include "server/dashboard.h"
#include "server/output_channel.h"
#include "server/request_id.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using api::SendError;
using api::SendJson;
using SteadyClock = std::chrono::steady_clock;

int64_t UnixTime() { return int64_t(std::time(nullptr)); }

}  // namespace

ApiServer::ApiServer(Engine& engine, const Tokenizer& tokenizer, const Model& model, ApiServerOptions options)
    : engine_(engine),
      tokenizer_(tokenizer),
      model_(model),
      options_(std::move(options)),
      chat_template_(options_.chat_template ? *options_.chat_template
                                            : ChatTemplate::Builtin(ChatFormatFor(tokenizer, model.config().model_type))),
      metrics_(options_.served_model_name) {}

// ---- routing -----------------------------------------------------------------------------------

void ApiServer::Handle(const HttpRequest& req, HttpResponseWriter& w) {
  if (!options_.api_key.empty() && req.path != "/health") {
    const std::string* auth = req.Header("authorization");
    // A browser opening the dashboard cannot send a header: its page takes the key in the URL
    // (/dashboard?key=KEY) and sends it as a header on every poll.
    const bool page_key = req.path == "/dashboard" && req.QueryParameter("key") == options_.api_key;
    if (!page_key && (auth == nullptr || *auth != "Bearer " + options_.api_key)) {
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
  if (p == "/dashboard") {
    if (!get) return method_not_allowed();
    return w.Send(200, "text/html; charset=utf-8", DashboardPage(), {{"Cache-Control", "no-store"}});
  }
  if (p == "/dashboard/data") {
    if (!get) return method_not_allowed();
    std::optional<dist::TpTraffic> tp;
    if (model_.tp_size() > 1) {
      if (auto group = dist::MpiGroup::Get(); group.ok()) tp = (*group)->traffic();
    }
    const auto now = SteadyClock::now();
    const EngineStatsSnapshot stats = engine_.stats();
    return SendJson(w, 200, DashboardData(DashboardSources{.stats = stats, .board = board_, .latencies = recent_latencies_,
                                                           .server_info = options_.server_info, .tp = tp,
                                                           .tp_size = model_.tp_size()},
                                          now, std::chrono::duration<double>(now - started_).count()));
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
                             {"tokenizer_path", options_.tokenizer_path},
                             {"is_generation", true},
                             {"served_model_name", options_.served_model_name},
                             {"model_type", model_.config().model_type},
                             {"vocab_size", model_.config().vocab_size},
                             {"max_context_length", model_.max_context()}});
  }
  if (p.rfind("/tokenizer_file/", 0) == 0) {
    // The model directory's tokenizer files, so that a client elsewhere (mlaserve batch) encodes
    // exactly as the server does without a copy of the model.
    if (!get) return method_not_allowed();
    const std::string name = p.substr(std::string_view("/tokenizer_file/").size());
    if (name == kChatTemplateFileName) {
      // The template this server renders (--chat-template, or the model's), under one name.
      if (!chat_template_.is_jinja()) return SendError(w, 404, "this server uses a built-in chat format", "not_found_error");
      return w.Send(200, "application/octet-stream", chat_template_.source());
    }
    const auto& names = Tokenizer::kFileNames;
    Result<std::string> bytes = Status::Error("not a tokenizer file");
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      // (not one of the names)
    } else if (const auto& files = options_.gguf_tokenizer_files) {
      // A GGUF file's tokenizer, as the Hugging Face files it stands for (no tiktoken.model).
      if (name == "tokenizer.json") bytes = files->tokenizer_json;
      if (name == "tokenizer_config.json") bytes = files->tokenizer_config_json;
    } else {
      bytes = ReadWholeFile(options_.tokenizer_path + "/" + name);
    }
    if (!bytes.ok()) return SendError(w, 404, "no tokenizer file " + name + " here", "not_found_error");
    return w.Send(200, "application/octet-stream", *bytes);
  }
  if (p == "/get_server_info") {
    json info = options_.server_info;
    const EngineStatsSnapshot s = engine_.stats();
    info["max_total_num_tokens"] = s.max_total_num_tokens;
    info["num_running_reqs"] = s.num_running_reqs;
    info["num_queue_reqs"] = s.num_queue_reqs;
    info["token_usage"] = s.token_usage;
    info["version"] = "mlaserve-0.1";
    // One random id per server process: a batch client records it with every token segment, so
    // a restart (even with the same flags) is visible in the output's provenance.
    static const std::string server_id = NewRequestId("srv-");
    info["server_id"] = server_id;
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
  const Result<json> parsed = ParseClientJson(req.body);
  if (!parsed.ok()) return SendError(w, 400, parsed.error());
  const json& body = *parsed;
  if (!body.is_object()) return SendError(w, 400, "the request body must be a JSON object");
  if (p == "/abort_request") {
    if (Status s = CheckFields(body, {{"rid"}}); !s.ok()) return SendError(w, 400, s.message());
    if (!body.contains("rid") || !body["rid"].is_string()) return SendError(w, 400, "'rid' (a string) is required");
    // A native rid, or the id of an OpenAI response (all its choices). As in SGLang, an id that
    // names nothing in flight (finished, or never issued) is answered 200 too.
    const std::string& rid = body["rid"].get_ref<const std::string&>();
    engine_.Abort(rid);
    for (const std::string& choice_rid : response_ids_.Find(rid)) engine_.Abort(choice_rid);
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
  if (p == "/v1/chat/completions") return HandleChat(body, req.body, w);
  return HandleCompletions(body, w);
}

// ---- driving one generation ------------------------------------------------------------------

Status ApiServer::Drive(std::vector<GenerateRequest> requests, HttpResponseWriter& w,
                        const std::function<bool(size_t, const RequestOutput&)>& on_output, bool internal) {
  std::vector<std::string> rids;
  for (const GenerateRequest& r : requests) rids.push_back(r.rid);
  auto channel = std::make_shared<OutputChannel>();
  size_t submitted = 0;
  bool aborted = false;
  auto abort_all = [&] {
    for (size_t i = 0; i < submitted; ++i) engine_.Abort(rids[i]);
    aborted = true;
  };
  std::vector<bool> finished(requests.size(), false);
  size_t num_finished = 0;
  // If building a response throws, the generations must not run on without a consumer.
  struct AbortUnlessFinished {
    Engine& engine;
    const std::vector<std::string>& rids;
    const std::vector<bool>& finished;
    const size_t& submitted;
    ~AbortUnlessFinished() {
      for (size_t i = 0; i < submitted; ++i) {
        if (!finished[i]) engine.Abort(rids[i]);
      }
    }
  } guard{engine_, rids, finished, submitted};
  // The dashboard's table: the client's requests (not the server's own), until each finishes.
  std::vector<std::shared_ptr<RequestBoard::Entry>> board_entries(requests.size());
  struct LeaveBoard {
    RequestBoard& board;
    const std::vector<std::shared_ptr<RequestBoard::Entry>>& entries;
    ~LeaveBoard() {
      for (const auto& e : entries) {
        if (e) board.Remove(e);
      }
    }
  } leave_board{board_, board_entries};
  for (; submitted < requests.size(); ++submitted) {
    const size_t index = submitted;
    if (!internal) board_entries[index] = board_.Add(rids[index], SteadyClock::now());
    const Status s = engine_.Submit(std::move(requests[index]), [channel, index](const OutputView& o) {
      channel->Push(index, o);
    });
    if (!s.ok()) {
      abort_all();  // the guard would too; this says it happens before returning
      return requests.size() > 1 ? Status::Error("request " + std::to_string(index) + ": " + s.message()) : s;
    }
  }
  std::vector<std::optional<SteadyClock::time_point>> last_token(requests.size());
  SteadyClock::time_point next_client_check = SteadyClock::now();
  OutputChannel::Item item;  // swapped with the channel's slots: its buffers circulate, reused
  while (num_finished < requests.size()) {
    const bool popped = channel->Pop(item, std::chrono::milliseconds(50));
    // Poll the client every 50 ms whether or not outputs keep coming (fast steps would
    // otherwise never leave time to notice a client that left a non-streaming request).
    if (!aborted && SteadyClock::now() >= next_client_check) {
      next_client_check = SteadyClock::now() + std::chrono::milliseconds(50);
      if (w.ClientGone()) abort_all();  // free the KV now; keep reading until the last chunks
    }
    if (!popped) continue;
    const RequestOutput& o = item.output;
    if (!o.new_token_ids.empty()) {
      const SteadyClock::time_point now = SteadyClock::now();
      auto& last = last_token[item.index];
      if (last && !internal) metrics_.ObserveInterTokenLatency(std::chrono::duration<double>(now - *last).count());
      last = now;
    }
    if (const auto& entry = board_entries[item.index]) {
      entry->prompt_tokens.store(o.prompt_tokens, std::memory_order_relaxed);
      entry->completion_tokens.store(o.completion_tokens, std::memory_order_relaxed);
    }
    if (!aborted && !on_output(item.index, o)) abort_all();
    if (o.finished) {
      finished[item.index] = true;
      ++num_finished;
      if (!internal) {
        metrics_.ObserveRequest(o.queue_time_s, o.ttft_s, o.e2e_latency_s, o.completion_tokens);
        if (o.completion_tokens > 0) {
          recent_latencies_.Observe(SteadyClock::now(), o.ttft_s,
                                    o.completion_tokens > 1 ? (o.e2e_latency_s - o.ttft_s) / (o.completion_tokens - 1) : -1.0);
        }
      }
      if (auto& entry = board_entries[item.index]) {
        board_.Remove(entry);
        entry.reset();
      }
    }
  }
  return Status::Ok();
}

void ApiServer::AppendSamples(const GenerateRequest& prompt, int n, const std::function<std::string(int)>& rid_of,
                              std::vector<GenerateRequest>& out, HttpResponseWriter& w) {
  // Without a prefix cache, or for a request that asks for prompt logprobs (which bypasses it),
  // there is nothing to share.
  if (n > 1 && options_.prefix_cache && prompt.logprob_start_len < 0) {
    GenerateRequest prefill = prompt;
    prefill.rid = NewRequestId("prefill-");
    prefill.sampling.max_new_tokens = 0;
    prefill.sampling.min_new_tokens = 0;
    prefill.sampling.return_logprob = false;
    std::vector<GenerateRequest> one;
    one.push_back(std::move(prefill));
    // An error here surfaces again, for the client, when the samples are submitted.
    (void)Drive(std::move(one), w, [](size_t, const RequestOutput&) { return true; }, /*internal=*/true);
  }
  for (int j = 0; j < n; ++j) {
    GenerateRequest sample = prompt;
    sample.rid = rid_of(j);
    if (j > 0 && sample.sampling.seed) sample.sampling.seed = *sample.sampling.seed + uint64_t(j) * 0x9E3779B97F4A7C15ull;
    out.push_back(std::move(sample));
  }
}

void ApiServer::HandleHealthGenerate(HttpResponseWriter& w) {
  if (draining_.load()) return SendError(w, 503, "the server is shutting down", "service_unavailable");
  GenerateRequest req;
  req.rid = NewRequestId("health-");
  req.input_ids = {tokenizer_.bos_id().value_or(0)};
  req.sampling.max_new_tokens = 1;
  req.sampling.temperature = 0;
  bool ok = false;
  std::vector<GenerateRequest> one;
  one.push_back(std::move(req));
  const Status s = Drive(std::move(one), w, [&](size_t, const RequestOutput& o) {
    if (o.finished) ok = o.finish_reason != FinishReason::kAbort;
    return true;
  }, /*internal=*/true);
  if (!s.ok() || !ok) return SendError(w, 503, "health check generation failed: " + s.message(), "service_unavailable");
  w.Send(200, "text/plain", "");
}

}  // namespace mlaserve
