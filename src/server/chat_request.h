// A /v1/chat/completions request's conversation, read into what the chat template receives:
// the messages, the tools, and the template switches the reply's parsers also need. Errors are
// one line for a 400, naming the field (and message index).
#pragma once

#include <cstddef>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace mlaserve {

// The messages as the chat template receives them: role, content (text parts joined into one
// string; null stays null), name, reasoning_content (earlier turns' reasoning, which thinking
// models' templates render or drop), an assistant's tool_calls ([{"id", "type": "function",
// "function": {"name", "arguments"}}], arguments the JSON text the client sent: DeepSeek's
// template concatenates it, Kimi's writes a string as it is) and a tool's tool_call_id.
Result<nlohmann::json> ReadChatMessages(const nlohmann::json& body);

// The tools the template receives, or null: none given, or "tool_choice": "none" (then the
// model is not told about them, as in SGLang). "auto" (the default) passes them all; "required"
// and a named function would need constrained decoding to force a call, and are refused.
Result<nlohmann::json> ReadChatTools(const nlohmann::json& body);

// Tool calls in the conversation so far (`messages` as ReadChatMessages returns them): Kimi-K2
// numbers its call ids across the conversation (functions.NAME:IDX), as SGLang does.
size_t CountToolCalls(const nlohmann::json& messages);

// Whether chat_template_kwargs turn the model's thinking off through the template's switch
// (DeepSeek-V3.1's "thinking", Qwen3's "enable_thinking").
bool ThinkingTurnedOff(const nlohmann::json& kwargs);

}  // namespace mlaserve
