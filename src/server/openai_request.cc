#include "server/openai_request.h"

#include <iterator>

#include "server/request_builder.h"

namespace mlaserve {

using nlohmann::json;

Status CheckOpenAiFields(const json& body, std::initializer_list<FieldRule> endpoint_rules) {
  static constexpr FieldRule kShared[] = {
      {"model"}, {"max_tokens"}, {"temperature"}, {"top_p"}, {"n"}, {"stream"}, {"stream_options"},
      {"logprobs"}, {"stop"}, {"presence_penalty"}, {"frequency_penalty"}, {"seed"}, {"logit_bias"},
      {"user"}, {"top_k"}, {"min_p"}, {"repetition_penalty"}, {"min_tokens"}, {"ignore_eos"},
      {"stop_token_ids"}, {"skip_special_tokens"}, {"no_stop_trim"},
      {"response_format", "structured output (json_object, json_schema) is not implemented", R"({"type":"text"})"},
      {"regex", "constrained decoding is not implemented"},
      {"json_schema", "constrained decoding is not implemented"},
      {"ebnf", "constrained decoding is not implemented"},
      {"lora_path", "LoRA adapters are not implemented"},
      {"functions", "the legacy 'functions' field is not implemented (use 'tools')"},
      {"function_call", "the legacy 'function_call' field is not implemented (use 'tool_choice')"}};
  std::vector<FieldRule> rules(std::begin(kShared), std::end(kShared));
  rules.insert(rules.end(), endpoint_rules.begin(), endpoint_rules.end());
  return CheckFields(body, rules);
}

Result<OpenAiFields> ReadOpenAiFields(const json& body, OpenAiEndpoint endpoint, size_t num_prompts,
                                      bool stream_reasoning) {
  const bool chat = endpoint == OpenAiEndpoint::kChat;
  const auto echo = chat ? Result<bool>(false) : BoolField(body, "echo", false);
  const auto n = IntField(body, "n", 1);
  const auto stream = BoolField(body, "stream", false);
  for (const Status* st : {&echo.status(), &n.status(), &stream.status()}) {
    if (!st->ok()) return *st;
  }
  OpenAiFields fields{.echo = *echo, .n = *n, .stream = *stream};
  if (!stream_reasoning && !fields.stream) return Status::Error("'stream_reasoning' is only allowed with \"stream\": true");
  MLA_RETURN_IF_ERROR(CheckGenerations(fields.n, int64_t(fields.n) * int64_t(num_prompts)));
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    if (!body["stream_options"].is_object()) return Status::Error("'stream_options' must be an object");
    MLA_RETURN_IF_ERROR(CheckFields(body["stream_options"], {{"include_usage"}}, "stream_options: "));
    const auto usage = BoolField(body["stream_options"], "include_usage", false);
    if (!usage.ok()) return usage.status();
    if (!fields.stream) return Status::Error("'stream_options' is only allowed with \"stream\": true");
    fields.include_usage = *usage;
  }
  // Logprobs: completions take an int (top-N); chat takes a bool plus top_logprobs.
  if (chat) {
    const auto lp = BoolField(body, "logprobs", false);
    const auto top = IntField(body, "top_logprobs", 0);
    if (!lp.ok()) return lp.status();
    if (!top.ok()) return top.status();
    fields.want_logprobs = *lp;
    fields.top_logprobs = *top;
    if (fields.top_logprobs > 0 && !fields.want_logprobs) {
      return Status::Error("'top_logprobs' requires \"logprobs\": true");
    }
  } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    const auto top = IntField(body, "logprobs", 0);
    if (!top.ok()) return top.status();
    fields.want_logprobs = true;
    fields.top_logprobs = *top;
  }
  return fields;
}

}  // namespace mlaserve
