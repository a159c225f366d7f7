// The request side of OpenAI's protocol, shared by /v1/completions (openai_completions.cc) and
// /v1/chat/completions (openai_chat.cc): the fields both endpoints implement or refuse, and
// the reading of those they share (n, stream, stream_options, logprobs). Each endpoint turns
// its own fields (a prompt; a conversation) into OpenAiPrompts; openai_response.cc generates
// and answers.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/reasoning_parser.h"
#include "chat/tool_call_parser.h"
#include "core/status.h"
#include "core/types.h"
#include "server/client_json.h"

namespace mlaserve {

enum class OpenAiEndpoint { kCompletions, kChat };

// One prompt: its ids and, for echo, its text (empty: the ids are decoded).
struct OpenAiPrompt {
  std::vector<TokenId> input_ids;
  std::string text;
};

// Chat only: how each reply is split (reasoning, content, tool calls). The default is a
// completion's: all content.
struct ChatReplyFormat {
  std::optional<chat::ReasoningParser> reasoning;  // --reasoning-parser, unless turned off
  std::optional<chat::ToolCallFormat> tool_format; // with tools given: --tool-call-parser
  size_t history_calls = 0;  // tool calls earlier in the conversation (Kimi-K2 numbers after them)
  bool tools_given = false;
  bool stream_reasoning = true;  // false: the reasoning is sent in one delta, once it ends (SGLang's field)
};

// The shared fields, read and checked.
struct OpenAiFields {
  bool echo = false;           // completions only
  int n = 1;                   // samples per prompt
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool want_logprobs = false;  // completions: "logprobs" given; chat: "logprobs": true
  int top_logprobs = 0;        // completions: "logprobs": N; chat: "top_logprobs"
};

// The first field of `body` that neither the shared table nor `endpoint_rules` names, or that
// one of them refuses (CheckFields).
Status CheckOpenAiFields(const nlohmann::json& body, std::initializer_list<FieldRule> endpoint_rules);

// Reads the shared fields of a request with `num_prompts` prompts, in the order their errors
// are reported. stream_reasoning (chat's SGLang field) is only allowed when streaming.
Result<OpenAiFields> ReadOpenAiFields(const nlohmann::json& body, OpenAiEndpoint endpoint, size_t num_prompts,
                                      bool stream_reasoning);

}  // namespace mlaserve
