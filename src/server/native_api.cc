// SGLang's native POST /generate: one prompt or a batch (`text` as a list of strings,
// `input_ids` as a list of lists), `sampling_params` (one object for all, or one per prompt),
// `n` samples per prompt, streaming, and logprobs of the output and (from logprob_start_len)
// of the prompt. One prompt with n = 1 answers one object, as SGLang does; anything else
// answers a list in prompt-major order (and streams events carrying their `index`). A stream's
// events carry the answer so far, or with --incremental-streaming-output only what is new.
#include <cmath>
#include <set>

#include "server/api_json.h"
#include "server/api_server.h"
#include "server/client_json.h"
#include "server/native_answer.h"
#include "server/request_builder.h"
#include "server/request_id.h"
#include "server/sampling_json.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using api::SendError;
using api::SendJson;
using api::WriteEvent;

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

// The prompts of a request: `text` (a string or a list of strings) or `input_ids` (a list of
// ids or a list of such lists). batched: the client sent lists, so the answer is a list.
struct Prompts {
  std::vector<std::vector<TokenId>> input_ids;
  bool batched = false;
};

Result<Prompts> ReadPrompts(const json& body, const Tokenizer& tokenizer) {
  const bool has_text = body.contains("text") && !body["text"].is_null();
  const bool has_ids = body.contains("input_ids") && !body["input_ids"].is_null();
  if (has_text == has_ids) return Status::Error("give exactly one of 'text' or 'input_ids'");
  Prompts prompts;
  auto add_text = [&](const json& text, const std::string& name) -> Status {
    if (!text.is_string()) return Status::Error("'" + name + "' must be a string");
    auto ids = EncodePromptText(tokenizer, text.get<std::string>(), name);
    if (!ids.ok()) return ids.status();
    prompts.input_ids.push_back(std::move(ids).value());
    return Status::Ok();
  };
  auto add_ids = [&](const json& ids, const std::string& name) -> Status {
    auto out = PromptIdsFromJson(ids, int(tokenizer.vocab_size()), name, "'" + name + "' must be a list of token ids");
    if (!out.ok()) return out.status();
    prompts.input_ids.push_back(std::move(out).value());
    return Status::Ok();
  };
  if (has_text) {
    const json& text = body["text"];
    if (text.is_array()) {
      if (text.empty()) return Status::Error("'text' is an empty list");
      prompts.batched = true;
      for (size_t i = 0; i < text.size(); ++i) MLA_RETURN_IF_ERROR(add_text(text[i], "text[" + std::to_string(i) + "]"));
    } else {
      MLA_RETURN_IF_ERROR(add_text(text, "text"));
    }
    return prompts;
  }
  const json& ids = body["input_ids"];
  if (!ids.is_array() || ids.empty()) return Status::Error("'input_ids' must be a non-empty list of token ids (or of lists)");
  if (ids[0].is_array()) {
    prompts.batched = true;
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::string name = "input_ids[" + std::to_string(i) + "]";
      if (!ids[i].is_array() || ids[i].empty()) return Status::Error("'" + name + "' must be a non-empty list of token ids");
      MLA_RETURN_IF_ERROR(add_ids(ids[i], name));
    }
  } else {
    MLA_RETURN_IF_ERROR(add_ids(ids, "input_ids"));
  }
  return prompts;
}

// The top-level fields of /generate: implemented, refused with a reason, or unknown (refused).
Status CheckGenerateFields(const json& body) {
  return CheckFields(
      body, {{"text"}, {"input_ids"}, {"sampling_params"}, {"rid"}, {"stream"}, {"return_logprob"},
             {"top_logprobs_num"}, {"logprob_start_len"}, {"return_text_in_logprobs"},
             {"log_metrics", "metrics are always recorded; only true is implemented", "true"},
             {"return_hidden_states", "hidden states are not returned", "false"},
             {"token_ids_logprob", "logprobs of chosen token ids are not implemented"},
             {"input_embeds", "embeddings as input are not implemented"},
             {"image_data", "this server runs text-only models"},
             {"audio_data", "this server runs text-only models"},
             {"video_data", "this server runs text-only models"},
             {"modalities", "this server runs text-only models"},
             {"lora_path", "LoRA adapters are not implemented"},
             {"lora_id", "LoRA adapters are not implemented"},
             {"session_params", "sessions are not implemented"},
             {"custom_logit_processor", "custom logit processors are not implemented"},
             {"bootstrap_host", "prefill/decode disaggregation is not implemented"},
             {"bootstrap_port", "prefill/decode disaggregation is not implemented"},
             {"bootstrap_room", "prefill/decode disaggregation is not implemented"},
             {"data_parallel_rank", "data parallelism is not implemented"},
             {"priority", "priority scheduling is not implemented"}});
}

}  // namespace

void ApiServer::HandleGenerate(const json& body, HttpResponseWriter& w) {
  if (Status s = CheckGenerateFields(body); !s.ok()) return SendError(w, 400, s.message());
  Result<Prompts> prompts = ReadPrompts(body, tokenizer_);
  if (!prompts.ok()) return SendError(w, 400, prompts.error());
  const size_t num_prompts = prompts->input_ids.size();

  // sampling_params: one object for every prompt, or a list with one per prompt.
  const json no_params;
  const json& params_field = body.contains("sampling_params") ? body["sampling_params"] : no_params;
  if (params_field.is_array() && params_field.size() != num_prompts) {
    return SendError(w, 400, "'sampling_params' as a list must have one entry per prompt (" +
                                 std::to_string(num_prompts) + ")");
  }
  // rid: a string for one prompt, a list with one per prompt for a batch; absent: made here.
  const json no_rid;
  const json& rid_field = body.contains("rid") ? body["rid"] : no_rid;
  if (!rid_field.is_null()) {
    const bool ok = prompts->batched ? rid_field.is_array() && rid_field.size() == num_prompts
                                     : rid_field.is_string();
    if (!ok) return SendError(w, 400, prompts->batched ? "'rid' must be a list of strings, one per prompt" : "'rid' must be a string");
    if (rid_field.is_array()) {
      std::set<std::string> seen;
      for (const json& r : rid_field) {
        if (!r.is_string()) return SendError(w, 400, "'rid' must be a list of strings, one per prompt");
        if (!seen.insert(r.get<std::string>()).second) {
          return SendError(w, 400, "'rid' lists '" + r.get<std::string>() + "' twice; each prompt needs its own");
        }
      }
    }
  }
  const auto stream_field = BoolField(body, "stream", false);
  const auto return_logprob = BoolField(body, "return_logprob", false);
  const auto top_logprobs_num = IntField(body, "top_logprobs_num", 0);
  const auto text_in_logprobs = BoolField(body, "return_text_in_logprobs", false);
  const auto logprob_start = IntField(body, "logprob_start_len", -1);
  for (const Status* st : {&stream_field.status(), &return_logprob.status(), &top_logprobs_num.status(),
                           &text_in_logprobs.status(), &logprob_start.status()}) {
    if (!st->ok()) return SendError(w, 400, st->message());
  }
  if (!*return_logprob && (*top_logprobs_num > 0 || *text_in_logprobs)) {
    return SendError(w, 400, "'top_logprobs_num' and 'return_text_in_logprobs' require \"return_logprob\": true");
  }

  const LogprobRequest logprobs{.return_logprob = *return_logprob,
                                .top_logprobs_num = *top_logprobs_num,
                                .logprob_start_len = *logprob_start >= 0 && *return_logprob ? *logprob_start : -1};
  std::vector<GenerateRequest> requests;
  for (size_t p = 0; p < num_prompts; ++p) {
    const json& params = params_field.is_array() ? params_field[p] : params_field;
    auto sampling = SamplingFromNative(params, model_.config().vocab_size);
    if (!sampling.ok()) return SendError(w, 400, sampling.error());
    const auto n = params.is_object() ? IntField(params, "n", 1) : Result<int>(1);
    if (!n.ok()) return SendError(w, 400, "sampling_params: " + n.error());
    if (Status st = CheckGenerations(*n, int64_t(requests.size()) + *n); !st.ok()) {
      return SendError(w, 400, "sampling_params: " + st.message());
    }
    const GenerateRequest req =
        BuildGenerateRequest(std::move(prompts->input_ids[p]), std::move(sampling).value(), logprobs);
    const std::string rid = rid_field.is_null() ? NewRequestId("gen-")
                            : rid_field.is_array() ? rid_field[p].get<std::string>() : rid_field.get<std::string>();
    const int samples = *n;
    AppendSamples(
        req, samples, [&](int j) { return samples > 1 ? rid + "-" + std::to_string(j) : rid; }, requests, w);
  }
  const bool list_answer = prompts->batched || requests.size() > 1;
  const bool stream = *stream_field;
  const bool want_logprobs = *return_logprob;
  const bool want_text = *text_in_logprobs;
  const int req_top_logprobs = *top_logprobs_num;

  std::vector<NativeAnswer> results;
  results.reserve(requests.size());
  for (const GenerateRequest& req : requests) results.emplace_back(req.rid, req.sampling.max_new_tokens);
  // SGLang's logprob entry: [logprob or null, token id, text or null].
  auto entry = [&](float logprob, TokenId token) {
    return json::array({std::isnan(logprob) ? json() : json(logprob), token,
                        want_text ? json(tokenizer_.Decode(std::span(&token, 1))) : json()});
  };
  auto top_entries = [&](const std::vector<TokenLogprob>& top) {
    json list = json::array();
    for (const TokenLogprob& t : top) list.push_back(entry(t.logprob, t.token));
    return list;
  };
  // Each answer's JSON text: a list answer joins them, a stream sends the latest as an event.
  std::vector<std::string> finished_answers(results.size());
  std::string event;
  size_t num_finished = 0;
  bool started = false;
  const Status s = Drive(std::move(requests), w, [&](size_t index, const RequestOutput& o) {
    NativeAnswer& r = results[index];
    r.AppendText(o.new_text);
    if (!o.input_token_ids.empty()) {
      json input_logprobs = json::array();
      for (size_t i = 0; i < o.input_token_ids.size(); ++i) {
        input_logprobs.push_back(entry(i < o.input_token_logprobs.size() ? o.input_token_logprobs[i] : NAN,
                                       o.input_token_ids[i]));
      }
      std::optional<std::string> input_top;
      if (req_top_logprobs > 0) {
        json list = json::array();
        for (const auto& top : o.input_top_logprobs) list.push_back(top.empty() ? json() : top_entries(top));
        input_top = api::Dump(list);
      }
      r.SetInputLogprobs(api::Dump(input_logprobs), std::move(input_top));
    }
    for (size_t i = 0; i < o.new_token_ids.size(); ++i) {
      r.AppendToken(o.new_token_ids[i]);
      if (i < o.new_token_logprobs.size()) r.AppendLogprob(api::Dump(entry(o.new_token_logprobs[i], o.new_token_ids[i])));
      if (i < o.new_top_logprobs.size()) r.AppendTopLogprobs(api::Dump(top_entries(o.new_top_logprobs[i])));
    }
    if (o.finished) ++num_finished;
    const bool all_done = num_finished == results.size();
    const std::string finish_reason = api::Dump(FinishReasonNative(o, r.max_new_tokens()));
    if (!stream) {
      if (o.finished) r.Serialize(o, finish_reason, want_logprobs, std::nullopt, finished_answers[index]);
      if (!all_done) return true;
      if (!list_answer) {
        w.Send(200, "application/json", finished_answers[0]);
        return true;
      }
      std::string joined = "[";
      for (size_t i = 0; i < finished_answers.size(); ++i) joined += (i > 0 ? "," : "") + finished_answers[i];
      joined += "]";
      w.Send(200, "application/json", joined);
      return true;
    }
    if (!started) {
      w.BeginStream(200, "text/event-stream");
      started = true;
    }
    event.assign("data: ");
    r.Serialize(o, finish_reason, want_logprobs, list_answer ? std::optional<size_t>(index) : std::nullopt, event);
    if (options_.incremental_streaming_output) r.ForgetSentOutput();
    event.append("\n\n");
    if (!w.Write(event)) return false;
    if (all_done) {
      api::EndEvents(w);
    }
    return true;
  });
  if (!s.ok()) api::SendRefusal(w, s.message(), draining_.load());
}

}  // namespace mlaserve
