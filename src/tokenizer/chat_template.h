// Chat prompts: messages -> the prompt text a chat model was trained on. A model's own Jinja
// chat template (tokenizer_config.json's `chat_template`, or chat_template.jinja beside it, or
// --chat-template FILE) is rendered by the engine in tokenizer/jinja/; a model without one gets
// a built-in format (a plain C++ rendering for text-only system / user / assistant messages).
// The output is meant for Tokenizer::Encode(prompt, /*add_bos=*/false): templates write BOS.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/jinja/template.h"
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

// A model's chat template, or the built-in format standing in for it. Immutable after
// construction; Render is const and thread-safe.
class ChatTemplate {
 public:
  // The built-in format (for models without a template).
  static ChatTemplate Builtin(ChatFormat format);
  // A Jinja template; `origin` names it in errors and logs (a path). `special_tokens` is an
  // object of template variables such as {"bos_token": "<s>", "eos_token": "</s>"}.
  static Result<ChatTemplate> FromJinja(std::string_view source, std::string origin,
                                        nlohmann::json special_tokens = nlohmann::json::object());
  // The model's template: `override_file` when not empty (--chat-template), else
  // model_dir/chat_template.jinja, else tokenizer_config.json's chat_template (a string, or a
  // list of {"name", "template"} from which "default" is used), else the built-in format for
  // this tokenizer (ChatFormatFor). Errors name the file and, for a bad template, its line.
  static Result<ChatTemplate> ForModel(const std::string& model_dir, const std::string& override_file,
                                       const Tokenizer& tokenizer, std::string_view model_type);

  // `messages`: a JSON list of message objects as the client sent them (role, content, name,
  // ...); `kwargs`: extra template variables (chat_template_kwargs, e.g. {"thinking": true}),
  // an object or null. Errors are one line; a template's own errors name its line.
  Result<std::string> Render(const nlohmann::json& messages, bool add_generation_prompt,
                             const nlohmann::json& kwargs = nullptr) const;
  // The same with object keys in the client's order (tojson of a message keeps it).
  Result<std::string> Render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const nlohmann::ordered_json& kwargs) const;
  Result<std::string> Render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  bool is_jinja() const { return jinja_.has_value(); }
  // The Jinja source (empty for a built-in format): what a server hands to `mlaserve batch`.
  const std::string& source() const { return source_; }
  // For logs: the template's file, or "built-in deepseek_v3".
  const std::string& origin() const { return origin_; }

 private:
  ChatTemplate() = default;
  template <typename Json>
  Result<std::string> RenderJson(const Json& messages, bool add_generation_prompt, const Json& kwargs) const;
  std::optional<jinja::Template> jinja_;
  ChatFormat format_ = ChatFormat::kMlaserve;  // used when !jinja_
  std::string origin_;
  std::string source_;
  nlohmann::json special_tokens_ = nlohmann::json::object();
};

// The file name a model directory's Jinja chat template has (Hugging Face's convention).
inline constexpr std::string_view kChatTemplateFileName = "chat_template.jinja";

// Kimi-K2's template inserts this system message when the first message is not a system one.
inline constexpr std::string_view kKimiDefaultSystemPrompt =
    "You are Kimi, an AI assistant created by Moonshot AI.";

// The built-in formats (builtin_chat_formats.cc). Renders `messages`; with
// add_generation_prompt, ends with the assistant-turn opener so the model's continuation is
// the reply.
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
