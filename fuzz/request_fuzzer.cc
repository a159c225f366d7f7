// A request body through the server's request building (server/openai_request.cc,
// request_builder.cc, chat_request.cc, sampling_json.cc): the functions ApiServer's handlers
// call, in the handlers' order, for /v1/completions, /v1/chat/completions and /generate, with
// the bundled model's tokenizer and a Jinja chat template that reads messages, tool calls,
// tools and chat_template_kwargs. The handlers themselves need an engine and a model, so their
// few lines of glue (which prompt field holds what) are restated here; everything they call
// is the server's own code.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling_params.h"
#include "fuzz_support.h"
#include "nlohmann/json.hpp"
#include "server/chat_request.h"
#include "server/client_json.h"
#include "server/openai_request.h"
#include "server/request_builder.h"
#include "server/sampling_json.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {
namespace {

using nlohmann::json;

// A small chat template using what model templates use on a request's fields: messages with
// content, reasoning_content, tool_calls and tool_call_id; tools through tojson; a kwarg switch.
constexpr std::string_view kTemplate = R"({%- set ns = namespace(system='') -%}
{{- bos_token -}}
{%- for m in messages if m['role'] == 'system' -%}{%- set ns.system = ns.system + (m['content'] or '') -%}{%- endfor -%}
{{- ns.system -}}
{%- if tools is defined and tools -%}<tools>{{ tools | tojson }}</tools>{%- endif -%}
{%- for m in messages -%}
  {%- if m.role == 'user' -%}<|user|>{{ m.content }}
  {%- elif m.role == 'assistant' -%}<|assistant|>
    {%- if m.reasoning_content and thinking is defined and thinking -%}<think>{{ m.reasoning_content }}</think>{%- endif -%}
    {{- m.content if m.content is not none else '' -}}
    {%- for c in m.tool_calls or [] -%}<call>{{ c.function.name }}:{{ c.function.arguments }}</call>{%- endfor -%}
    {{- eos_token -}}
  {%- elif m.role == 'tool' -%}<|tool|>{{ m.tool_call_id }}:{{ m.content | string | trim }}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|assistant|>{%- endif -%})";

struct Fixture {
  Tokenizer tokenizer;
  ChatTemplate chat_template;
};

const Fixture& GetFixture() {
  static const Fixture* fixture = [] {
    auto tokenizer = Tokenizer::FromDirectory(fuzz::SourcePath("models/shakespeare-mla"));
    auto chat_template = ChatTemplate::FromJinja(kTemplate, "request_fuzzer",
                                                 json{{"bos_token", "<|bos|>"}, {"eos_token", "<|eos|>"}});
    if (!tokenizer.ok() || !chat_template.ok()) {
      std::fprintf(stderr, "request_fuzzer: %s\n", tokenizer.ok() ? chat_template.error().c_str() : tokenizer.error().c_str());
      std::abort();
    }
    return new Fixture{std::move(tokenizer).value(), std::move(chat_template).value()};
  }();
  return *fixture;
}

// /v1/completions' prompt: a string, a list of ids, or a list of those (openai_completions.cc).
size_t ReadCompletionPrompts(const json& body, const Tokenizer& tokenizer) {
  if (!body.contains("prompt")) return 0;
  const json& prompt = body["prompt"];
  size_t num_prompts = 0;
  auto one = [&](const json& p, const std::string& name) {
    if (p.is_string()) {
      num_prompts += EncodePromptText(tokenizer, p.get<std::string>(), name).ok();
    } else if (p.is_array()) {
      num_prompts += PromptIdsFromJson(p, int(tokenizer.vocab_size()), name, name + " must be a list of integers").ok();
    }
  };
  if (prompt.is_array() && !prompt.empty() && !prompt[0].is_number_integer()) {
    for (size_t i = 0; i < prompt.size(); ++i) one(prompt[i], "prompt[" + std::to_string(i) + "]");
  } else {
    one(prompt, "prompt");
  }
  return num_prompts;
}

void Completions(const json& body, const Fixture& f) {
  if (!CheckOpenAiFields(body, {{"prompt"}, {"echo"}, {"best_of", "not implemented", "1"}}).ok()) return;
  const size_t num_prompts = ReadCompletionPrompts(body, f.tokenizer);
  if (num_prompts == 0) return;
  if (!ReadOpenAiFields(body, OpenAiEndpoint::kCompletions, num_prompts, /*stream_reasoning=*/true).ok()) return;
  auto sampling = SamplingFromOpenAi(body, 16, int(f.tokenizer.vocab_size()));
  if (sampling.ok()) (void)Validate(*sampling, int(f.tokenizer.vocab_size()));
}

void Chat(const json& body, std::string_view raw_body, const Fixture& f) {
  if (!CheckOpenAiFields(body, {{"messages"}, {"max_completion_tokens"}, {"top_logprobs"}, {"chat_template_kwargs"},
                                {"tools"}, {"tool_choice"}, {"separate_reasoning"}, {"stream_reasoning"}})
           .ok()) {
    return;
  }
  auto messages = ReadChatMessages(body);
  if (!messages.ok()) return;
  const json kwargs = body.contains("chat_template_kwargs") ? body["chat_template_kwargs"] : json();
  if (!kwargs.is_null() && !kwargs.is_object()) return;
  auto tools = ReadChatTools(body);
  if (!tools.ok()) return;
  const auto stream_reasoning = BoolField(body, "stream_reasoning", true);
  if (!stream_reasoning.ok()) return;
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(raw_body, nullptr, false);
  auto ordered_field = [&](const char* key) {
    return ordered.is_object() && ordered.contains(key) ? ordered[key] : nlohmann::ordered_json();
  };
  nlohmann::ordered_json template_kwargs =
      kwargs.is_object() ? ordered_field("chat_template_kwargs") : nlohmann::ordered_json::object();
  if (!tools->is_null()) {
    if (kwargs.is_object() && kwargs.contains("tools")) return;
    template_kwargs["tools"] = ordered_field("tools");
    (void)CountToolCalls(*messages);
  }
  (void)ThinkingTurnedOff(kwargs);
  const auto template_messages =
      nlohmann::ordered_json::parse(messages->dump(-1, ' ', false, json::error_handler_t::replace));
  auto text = f.chat_template.Render(template_messages, /*add_generation_prompt=*/true, template_kwargs);
  if (!text.ok()) return;
  auto ids = f.tokenizer.Encode(*text, /*add_bos=*/false);
  if (!ids.ok()) return;
  if (!ReadOpenAiFields(body, OpenAiEndpoint::kChat, 1, *stream_reasoning).ok()) return;
  auto sampling = SamplingFromOpenAi(body, 4096, int(f.tokenizer.vocab_size()));
  if (sampling.ok()) (void)Validate(*sampling, int(f.tokenizer.vocab_size()));
}

// /generate (native_api.cc): text or input_ids, sampling_params (one, or one per prompt), n.
void Generate(const json& body, const Fixture& f) {
  std::vector<std::vector<TokenId>> prompts;
  if (body.contains("text") && body["text"].is_string()) {
    auto ids = EncodePromptText(f.tokenizer, body["text"].get<std::string>(), "text");
    if (ids.ok()) prompts.push_back(std::move(ids).value());
  } else if (body.contains("input_ids")) {
    const json& ids = body["input_ids"];
    if (!ids.is_array() || ids.empty()) return;
    if (ids[0].is_array()) {
      for (const json& one : ids) {
        auto read = PromptIdsFromJson(one, int(f.tokenizer.vocab_size()), "input_ids[i]", "not ids");
        if (!read.ok()) return;
        prompts.push_back(std::move(read).value());
      }
    } else {
      auto read = PromptIdsFromJson(ids, int(f.tokenizer.vocab_size()), "input_ids", "not ids");
      if (!read.ok()) return;
      prompts.push_back(std::move(read).value());
    }
  }
  const json no_params;
  const json& params_field = body.contains("sampling_params") ? body["sampling_params"] : no_params;
  if (params_field.is_array() && params_field.size() != prompts.size()) return;
  const auto top_logprobs_num = IntField(body, "top_logprobs_num", 0);
  const auto logprob_start = IntField(body, "logprob_start_len", -1);
  if (!top_logprobs_num.ok() || !logprob_start.ok()) return;
  const LogprobRequest logprobs{.return_logprob = true, .top_logprobs_num = *top_logprobs_num,
                                .logprob_start_len = *logprob_start};
  int64_t generations = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const json& params = params_field.is_array() ? params_field[p] : params_field;
    auto sampling = SamplingFromNative(params, int(f.tokenizer.vocab_size()));
    if (!sampling.ok()) return;
    const auto n = params.is_object() ? IntField(params, "n", 1) : Result<int>(1);
    if (!n.ok()) return;
    generations += *n;
    if (!CheckGenerations(*n, generations).ok()) return;
    (void)Validate(*sampling, int(f.tokenizer.vocab_size()));
    (void)BuildGenerateRequest(std::move(prompts[p]), std::move(sampling).value(), logprobs);
  }
}

}  // namespace
}  // namespace mlaserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const mlaserve::Fixture& fixture = mlaserve::GetFixture();
  const std::string_view raw_body = mlaserve::fuzz::AsText(data, size);
  auto body = mlaserve::ParseClientJson(raw_body);
  if (!body.ok() || !body->is_object()) return 0;
  mlaserve::Completions(*body, fixture);
  mlaserve::Chat(*body, raw_body, fixture);
  mlaserve::Generate(*body, fixture);
  return 0;
}
