// OpenAI's POST /v1/chat/completions: the conversation (chat_request.cc) rendered through the
// chat template into one prompt, tools passed to the template, and how each reply is split
// (--reasoning-parser, --tool-call-parser; SGLang's separate_reasoning and stream_reasoning).
// The shared fields are openai_request.cc's; generating and answering is openai_response.cc's.
#include <utility>

#include "server/api_json.h"
#include "server/api_server.h"
#include "server/chat_request.h"
#include "server/openai_request.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using api::SendError;

Status CheckChatFields(const json& body) {
  return CheckOpenAiFields(
      body, {{"messages"}, {"max_completion_tokens"}, {"top_logprobs"},
             {"modalities", "only text output is implemented", R"(["text"])"},
             {"audio", "audio output is not implemented"},
             {"prediction", "predicted outputs are not implemented"},
             {"reasoning_effort", "reasoning controls are not implemented"},
             {"store", "stored completions are not implemented", "false"},
             {"metadata", "stored completions are not implemented"},
             {"service_tier", "service tiers are not implemented"},
             {"web_search_options", "web search is not implemented"},
             {"chat_template_kwargs"}, {"tools"}, {"tool_choice"},
             {"parallel_tool_calls", "limiting the reply to one tool call needs constrained decoding, which is not "
                                     "implemented", "true"},
             {"continue_final_message", "continuing the final message is not implemented"},
             {"separate_reasoning"}, {"stream_reasoning"}});
}

}  // namespace

void ApiServer::HandleChat(const json& body, std::string_view raw_body, HttpResponseWriter& w) {
  if (Status s = CheckChatFields(body); !s.ok()) return SendError(w, 400, s.message());
  if (!CheckServedModel(body, w)) return;
  ChatReplyFormat format;
  auto messages = ReadChatMessages(body);
  if (!messages.ok()) return SendError(w, 400, messages.error());
  const json kwargs = body.contains("chat_template_kwargs") ? body["chat_template_kwargs"] : json();
  if (!kwargs.is_null() && !kwargs.is_object()) return SendError(w, 400, "'chat_template_kwargs' must be an object");
  auto tools = ReadChatTools(body);
  if (!tools.ok()) return SendError(w, 400, tools.error());
  const auto separate = BoolField(body, "separate_reasoning", true);
  if (!separate.ok()) return SendError(w, 400, separate.error());
  const auto stream_reasoning = BoolField(body, "stream_reasoning", true);
  if (!stream_reasoning.ok()) return SendError(w, 400, stream_reasoning.error());
  format.stream_reasoning = *stream_reasoning;
  // What the template receives beside the messages, in the client's key order: HF's tojson
  // (Kimi-K2's template writes `tools | tojson`) keeps it, and the prompt must be the same.
  // raw_body parsed into `body` already, so it parses again.
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(raw_body, nullptr, false);
  auto ordered_field = [&](const char* key) {
    return ordered.is_object() && ordered.contains(key) ? ordered[key] : nlohmann::ordered_json();
  };
  nlohmann::ordered_json template_kwargs =
      kwargs.is_object() ? ordered_field("chat_template_kwargs") : nlohmann::ordered_json::object();
  if (!tools->is_null()) {
    if (!chat_template_.is_jinja()) {
      return SendError(w, 400, "'tools' need the model's Jinja chat template; this server uses the " +
                                   chat_template_.origin() + " (give --chat-template FILE)");
    }
    if (kwargs.is_object() && kwargs.contains("tools")) {
      return SendError(w, 400, "give tools in 'tools', not in 'chat_template_kwargs'");
    }
    template_kwargs["tools"] = ordered_field("tools");
    format.tools_given = true;
    format.tool_format = options_.tool_call_parser;
    format.history_calls = CountToolCalls(*messages);
  }
  if (options_.reasoning_parser && *separate) {
    format.reasoning.emplace(*options_.reasoning_parser, !ThinkingTurnedOff(kwargs));
  }
  const auto template_messages =
      nlohmann::ordered_json::parse(messages->dump(-1, ' ', false, json::error_handler_t::replace));
  auto text = chat_template_.Render(template_messages, /*add_generation_prompt=*/true, template_kwargs);
  if (!text.ok()) return SendError(w, 400, text.error());
  auto ids = tokenizer_.Encode(*text, /*add_bos=*/false);
  if (!ids.ok()) return SendError(w, 400, ids.error());
  std::vector<OpenAiPrompt> prompts;
  prompts.push_back({std::move(ids).value(), ""});
  const auto fields = ReadOpenAiFields(body, OpenAiEndpoint::kChat, prompts.size(), format.stream_reasoning);
  if (!fields.ok()) return SendError(w, 400, fields.error());
  RespondOpenAi(body, OpenAiEndpoint::kChat, *fields, std::move(prompts), std::move(format), w);
}

}  // namespace mlaserve
