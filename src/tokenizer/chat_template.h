// Chat prompt formats: messages -> the prompt text a chat model was trained on. Each format is
// a plain C++ rendering of that model's Jinja chat template for text-only messages with roles
// system / user / assistant (no tools, no images); other roles are an error. The output is
// meant for Tokenizer::Encode(prompt, /*add_bos=*/false): formats that start with BOS spell it.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {

enum class ChatFormat {
  kMlaserve,    // the bundled model: <|bos|><|user|>...<|end|><|assistant|>
  kDeepSeekV3,  // DeepSeek-V2/V3: <｜begin▁of▁sentence｜>system<｜User｜>...<｜Assistant｜>
  kKimiK2,      // Kimi-K2: <|im_user|>user<|im_middle|>...<|im_end|>
};

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// Kimi-K2's template inserts this system message when the first message is not a system one.
inline constexpr std::string_view kKimiDefaultSystemPrompt =
    "You are Kimi, an AI assistant created by Moonshot AI.";

// Renders `messages`; with add_generation_prompt, ends with the assistant-turn opener so the
// model's continuation is the reply.
Result<std::string> ApplyChatTemplate(ChatFormat format, std::span<const ChatMessage> messages,
                                      bool add_generation_prompt);

// "mlaserve", "deepseek_v3" (or "deepseek-v3", "deepseek"), "kimi_k2" (or "kimi-k2", "kimi").
Result<ChatFormat> ChatFormatFromName(std::string_view name);
std::string_view ChatFormatName(ChatFormat format);

// From config.json's model_type: deepseek_v2 / deepseek_v3 -> kDeepSeekV3, kimi_k2 -> kKimiK2,
// anything else -> kMlaserve.
ChatFormat ChatFormatForModelType(std::string_view model_type);

// The format whose role tokens this tokenizer actually has (a small model may reuse the
// DeepSeek-V3 architecture with its own chat tokens, as the bundled model does); falls back to
// ChatFormatForModelType.
ChatFormat ChatFormatFor(const Tokenizer& tokenizer, std::string_view model_type);

}  // namespace mlaserve
