// The answer side of OpenAI's protocol for /v1/completions and /v1/chat/completions: one
// GenerateRequest per prompt and sample (request_builder.h), driven together, answered as one
// response or as a stream of chunks: choices, their logprobs (openai_logprobs.cc), chat replies
// split into reasoning, content and tool calls, usage.
#include <ctime>
#include <optional>
#include <utility>

#include "chat/chat_output.h"
#include "server/api_json.h"
#include "server/api_server.h"
#include "server/openai_logprobs.h"
#include "server/openai_request.h"
#include "server/request_builder.h"
#include "server/request_id.h"
#include "server/sampling_json.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using api::SendError;
using api::SendJson;
using api::WriteEvent;

// OpenAI's finish_reason: "stop", "length", or "abort" (SGLang's extension).
json FinishReasonOpenAi(const RequestOutput& o) {
  if (!o.finished) return nullptr;
  return FinishReasonName(o.finish_reason);
}

// One choice being generated: what it has said so far and its logprobs.
struct Choice {
  size_t prompt_index = 0;
  int sample_index = 0;
  std::string echo;            // the prompt's text, sent before the first completion text
  bool echo_sent = false;
  bool role_sent = false;      // chat streaming: the first {"role": "assistant"} delta
  std::string text;            // content
  std::optional<chat::ChatOutputParser> parser;  // chat with a reasoning or tool-call parser
  std::string reasoning;       // non-streaming: reasoning_content; streaming without
                               // stream_reasoning: the reasoning not sent yet
  std::vector<std::string> call_ids;  // one per tool call, made when the call starts
  int64_t text_offset = 0;     // characters of this choice's text covered by logprobs so far
  json logprobs;               // non-streaming: all of them
  RequestOutput held;          // streaming: logprobs of tokens whose text is still held back
  std::optional<RequestOutput> last;  // the finished output (for usage)
};

}  // namespace

bool ApiServer::CheckServedModel(const json& body, HttpResponseWriter& w) {
  if (!body.contains("model") || body["model"].is_null()) return true;
  if (!body["model"].is_string()) {
    SendError(w, 400, "'model' must be a string");
    return false;
  }
  const std::string name = body["model"].get<std::string>();
  if (name == options_.served_model_name || name == options_.model_path) return true;
  SendError(w, 404, "The model '" + name + "' does not exist (this server serves '" + options_.served_model_name + "')",
            "not_found_error");
  return false;
}

void ApiServer::RespondOpenAi(const json& body, OpenAiEndpoint endpoint, const OpenAiFields& fields,
                              std::vector<OpenAiPrompt> prompts, ChatReplyFormat format, HttpResponseWriter& w) {
  const bool chat = endpoint == OpenAiEndpoint::kChat;
  const bool echo = fields.echo, stream = fields.stream, want_lp = fields.want_logprobs;
  const std::optional<chat::ReasoningParser>& reasoning = format.reasoning;
  const std::optional<chat::ToolCallFormat>& tool_format = format.tool_format;
  const bool stream_reasoning = format.stream_reasoning;
  const LogprobRequest logprobs{.return_logprob = want_lp,
                                .top_logprobs_num = fields.top_logprobs,
                                // with echo, the prompt's logprobs come back too
                                .logprob_start_len = echo && want_lp ? 0 : -1};
  const int n = fields.n;
  const std::string id = NewRequestId(chat ? "chatcmpl-" : "cmpl-");
  std::vector<GenerateRequest> requests;
  std::vector<Choice> choices;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const int remaining = std::max(1, model_.max_context() - int(prompts[p].input_ids.size()));
    auto sampling = SamplingFromOpenAi(body, chat ? std::min(remaining, 4096) : 16, model_.config().vocab_size);
    if (!sampling.ok()) return SendError(w, 400, sampling.error());
    GenerateRequest req = BuildGenerateRequest(std::move(prompts[p].input_ids), std::move(sampling).value(), logprobs);
    // Tool-call markers are special tokens in Kimi's vocabulary: keep them in the text, as SGLang does.
    if (format.tools_given) req.sampling.skip_special_tokens = false;
    std::string echo_text;
    if (echo) echo_text = prompts[p].text.empty() ? tokenizer_.Decode(req.input_ids) : prompts[p].text;
    const size_t first = requests.size();
    AppendSamples(req, n, [&](int j) { return id + "-" + std::to_string(first + size_t(j)); }, requests, w);
    for (int j = 0; j < n; ++j) {
      choices.push_back({.prompt_index = p, .sample_index = j, .echo = echo_text});
      if (reasoning || tool_format) choices.back().parser.emplace(reasoning, tool_format);
    }
  }
  const bool show_reasoning = reasoning.has_value();
  const int64_t created = int64_t(std::time(nullptr));
  const std::string object = chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  const OpenAiLogprobs logprobs_json(tokenizer_, endpoint);
  for (Choice& c : choices) c.logprobs = logprobs_json.Empty();
  auto usage = [&] {
    int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
    for (const Choice& c : choices) {
      if (!c.last) continue;
      completion_tokens += c.last->completion_tokens;
      if (c.sample_index == 0) {  // a prompt counts once however many samples it has
        prompt_tokens += c.last->prompt_tokens;
        cached_tokens += c.last->cached_tokens;
      }
    }
    return json{{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
  };
  auto envelope = [&](json choice_list) {
    return json{{"id", id}, {"object", object}, {"created", created}, {"model", options_.served_model_name},
                {"choices", std::move(choice_list)}};
  };
  // A reply's next piece, split by its parsers (without any: all content). Tool calls get their
  // ids as they start: Kimi-K2's own functions.NAME:IDX, numbered after the conversation's
  // earlier calls, or call_ + 24 random hex digits, as SGLang makes them.
  auto split = [&](Choice& c, const std::string& text, bool last) {
    if (!c.parser) return chat::ChatDelta{.reasoning = "", .content = text, .calls = {}};
    chat::ChatDelta delta = c.parser->Push(text, last);
    for (const chat::ToolCallDelta& d : delta.calls) {
      if (!d.starts) continue;
      c.call_ids.push_back(tool_format == chat::ToolCallFormat::kKimiK2
                               ? "functions." + d.name + ":" + std::to_string(format.history_calls + d.index)
                               : NewRequestId("call_").substr(0, 5 + 24));
    }
    return delta;
  };
  // "tool_calls" when the model stopped after calling tools (a cut-off reply stays "length").
  auto finish_reason = [&](const Choice& c, const RequestOutput& o) {
    if (o.finished && !c.call_ids.empty() && o.finish_reason == FinishReason::kStop) return json("tool_calls");
    return FinishReasonOpenAi(o);
  };
  auto delta_json = [&](const Choice& c, const chat::ChatDelta& delta) {
    json out = json::object();
    if (!delta.reasoning.empty()) out["reasoning_content"] = delta.reasoning;
    if (!delta.content.empty()) out["content"] = delta.content;
    for (const chat::ToolCallDelta& d : delta.calls) {
      json call{{"index", d.index}, {"function", {{"arguments", d.arguments}}}};
      if (d.starts) {
        call["id"] = c.call_ids[d.index];
        call["type"] = "function";
        call["function"]["name"] = d.name;
      }
      out["tool_calls"].push_back(std::move(call));
    }
    return out;
  };
  auto message_json = [&](const Choice& c) {
    json message{{"role", "assistant"}, {"content", c.text}};
    if (show_reasoning) message["reasoning_content"] = c.reasoning.empty() ? json() : json(c.reasoning);
    if (c.parser && !c.parser->calls().empty()) {
      json calls = json::array();
      for (size_t i = 0; i < c.parser->calls().size(); ++i) {
        const chat::ToolCall& call = c.parser->calls()[i];
        calls.push_back({{"id", c.call_ids[i]}, {"type", "function"},
                         {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      }
      message["tool_calls"] = std::move(calls);
    }
    return message;
  };
  std::vector<std::string> rids;
  for (const GenerateRequest& r : requests) rids.push_back(r.rid);
  // The client may abort the response by its id once it has it (a stream's first event).
  const ResponseIds::Registration abortable = response_ids_.Register(id, std::move(rids));
  size_t num_finished = 0;
  bool started = false;
  const Status s = Drive(std::move(requests), w, [&](size_t index, const RequestOutput& o) {
    Choice& c = choices[index];
    std::string new_text = o.new_text;
    if (!c.echo_sent) {  // the first output: the prompt comes first
      c.echo_sent = true;
      new_text = c.echo + new_text;
    }
    if (o.finished) {
      c.last = o;
      ++num_finished;
    }
    const bool all_done = num_finished == choices.size();
    chat::ChatDelta delta = split(c, new_text, o.finished);
    if (stream && !stream_reasoning) {
      c.reasoning += delta.reasoning;
      delta.reasoning.clear();
      const bool reasoning_over = o.finished || !delta.content.empty() || !delta.calls.empty();
      if (reasoning_over) delta.reasoning = std::exchange(c.reasoning, "");
    }
    if (!stream) {
      c.text += delta.content;
      c.reasoning += delta.reasoning;
      if (want_lp) {
        logprobs_json.AddPrompt(o, c.logprobs, c.text_offset);
        logprobs_json.AddOutput(o, c.logprobs, c.text_offset);
      }
      if (!all_done) return true;
      json list = json::array();
      for (size_t i = 0; i < choices.size(); ++i) {
        json choice{{"index", i}, {"finish_reason", finish_reason(choices[i], *choices[i].last)}};
        if (chat) {
          choice["message"] = message_json(choices[i]);
          choice["logprobs"] = want_lp ? json{{"content", choices[i].logprobs}} : json();
        } else {
          choice["text"] = choices[i].text;
          choice["logprobs"] = want_lp ? choices[i].logprobs : json();
        }
        list.push_back(std::move(choice));
      }
      json response = envelope(std::move(list));
      response["usage"] = usage();
      SendJson(w, 200, response);
      return true;
    }
    if (!started) {
      w.BeginStream(200, "text/event-stream");
      started = true;
    }
    if (chat && !c.role_sent) {
      c.role_sent = true;
      json first{{"index", index}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
      if (!WriteEvent(w, envelope(json::array({first})))) return false;
    }
    // Logprobs of tokens whose text is still held back (a split UTF-8 character, a possible
    // stop string, a possible reasoning or tool-call marker) wait for the next event that
    // carries something.
    json chunk_lp = want_lp ? logprobs_json.Empty() : json();
    if (want_lp) {
      logprobs_json.AddPrompt(o, chunk_lp, c.text_offset);
      c.held.new_token_ids.insert(c.held.new_token_ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      c.held.new_token_logprobs.insert(c.held.new_token_logprobs.end(), o.new_token_logprobs.begin(), o.new_token_logprobs.end());
      c.held.new_top_logprobs.insert(c.held.new_top_logprobs.end(), o.new_top_logprobs.begin(), o.new_top_logprobs.end());
    }
    if (!delta.empty() || o.finished) {
      if (want_lp) {
        logprobs_json.AddOutput(c.held, chunk_lp, c.text_offset);
        c.held.new_token_ids.clear();  // keeps the capacity for the next held tokens
        c.held.new_token_logprobs.clear();
        c.held.new_top_logprobs.clear();
      }
      json choice{{"index", index}, {"finish_reason", finish_reason(c, o)}};
      if (chat) {
        choice["delta"] = delta_json(c, delta);
        choice["logprobs"] = want_lp ? json{{"content", chunk_lp}} : json();
      } else {
        choice["text"] = delta.content;
        choice["logprobs"] = want_lp ? chunk_lp : json();
      }
      if (!WriteEvent(w, envelope(json::array({choice})))) return false;
    }
    if (all_done) {
      if (fields.include_usage) {
        json last = envelope(json::array());
        last["usage"] = usage();
        if (!WriteEvent(w, last)) return false;
      }
      api::EndEvents(w);
    }
    return true;
  });
  if (!s.ok()) api::SendRefusal(w, s.message(), draining_.load());
}

}  // namespace mlaserve
