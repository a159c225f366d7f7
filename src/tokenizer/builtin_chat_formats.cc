// The built-in chat formats for models without a Jinja template: one renderer per format. The
// DeepSeek-V3 and Kimi-K2 renderers follow the models' published chat templates for plain text.
#include "tokenizer/chat_template.h"

#include <vector>

namespace mlaserve {
namespace {

enum class Role { kSystem, kUser, kAssistant };

Result<Role> ParseRole(const ChatMessage& message, size_t index) {
  if (message.role == "system") return Role::kSystem;
  if (message.role == "user") return Role::kUser;
  if (message.role == "assistant") return Role::kAssistant;
  return Status::Error("chat message " + std::to_string(index) + " has unsupported role '" +
                       message.role + "' (expected system, user or assistant)");
}

Status ParseRoles(std::span<const ChatMessage> messages, std::vector<Role>* roles) {
  roles->reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    Result<Role> role = ParseRole(messages[i], i);
    if (!role.ok()) return role.status();
    roles->push_back(role.value());
  }
  return Status::Ok();
}

// <|bos|> then <|ROLE|>content<|end|> per message.
std::string RenderMlaserve(std::span<const ChatMessage> messages, std::span<const Role> roles,
                           bool add_generation_prompt) {
  std::string prompt = "<|bos|>";
  for (size_t i = 0; i < messages.size(); ++i) {
    switch (roles[i]) {
      case Role::kSystem: prompt += "<|system|>"; break;
      case Role::kUser: prompt += "<|user|>"; break;
      case Role::kAssistant: prompt += "<|assistant|>"; break;
    }
    prompt += messages[i].content;
    prompt += "<|end|>";
  }
  if (add_generation_prompt) prompt += "<|assistant|>";
  return prompt;
}

// All system messages, joined by a blank line, right after BOS; then the turns in order.
std::string RenderDeepSeekV3(std::span<const ChatMessage> messages, std::span<const Role> roles,
                             bool add_generation_prompt) {
  std::string prompt = "<｜begin▁of▁sentence｜>";
  bool first_system = true;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (roles[i] != Role::kSystem) continue;
    if (!first_system) prompt += "\n\n";
    prompt += messages[i].content;
    first_system = false;
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (roles[i] == Role::kUser) {
      prompt += "<｜User｜>";
      prompt += messages[i].content;
    } else if (roles[i] == Role::kAssistant) {
      prompt += "<｜Assistant｜>";
      prompt += messages[i].content;
      prompt += "<｜end▁of▁sentence｜>";
    }
  }
  if (add_generation_prompt) prompt += "<｜Assistant｜>";
  return prompt;
}

// <|im_ROLE|>role<|im_middle|>content<|im_end|> per message, after the default system
// message when the conversation does not open with one.
std::string RenderKimiK2(std::span<const ChatMessage> messages, std::span<const Role> roles,
                         bool add_generation_prompt) {
  std::string prompt;
  if (!messages.empty() && roles[0] != Role::kSystem) {
    prompt += "<|im_system|>system<|im_middle|>";
    prompt += kKimiDefaultSystemPrompt;
    prompt += "<|im_end|>";
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    switch (roles[i]) {
      case Role::kSystem: prompt += "<|im_system|>system<|im_middle|>"; break;
      case Role::kUser: prompt += "<|im_user|>user<|im_middle|>"; break;
      case Role::kAssistant: prompt += "<|im_assistant|>assistant<|im_middle|>"; break;
    }
    prompt += messages[i].content;
    prompt += "<|im_end|>";
  }
  if (add_generation_prompt) prompt += "<|im_assistant|>assistant<|im_middle|>";
  return prompt;
}

}  // namespace

Result<std::string> ApplyChatTemplate(ChatFormat format, std::span<const ChatMessage> messages,
                                      bool add_generation_prompt) {
  std::vector<Role> roles;
  MLA_RETURN_IF_ERROR(ParseRoles(messages, &roles));
  switch (format) {
    case ChatFormat::kMlaserve: return RenderMlaserve(messages, roles, add_generation_prompt);
    case ChatFormat::kDeepSeekV3: return RenderDeepSeekV3(messages, roles, add_generation_prompt);
    case ChatFormat::kKimiK2: return RenderKimiK2(messages, roles, add_generation_prompt);
  }
  return Status::Error("unknown chat format");
}

Result<ChatFormat> ChatFormatFromName(std::string_view name) {
  if (name == "mlaserve") return ChatFormat::kMlaserve;
  if (name == "deepseek_v3" || name == "deepseek-v3" || name == "deepseek") {
    return ChatFormat::kDeepSeekV3;
  }
  if (name == "kimi_k2" || name == "kimi-k2" || name == "kimi") return ChatFormat::kKimiK2;
  return Status::Error("unknown chat format '" + std::string(name) +
                       "' (expected mlaserve, deepseek_v3 or kimi_k2)");
}

std::string_view ChatFormatName(ChatFormat format) {
  switch (format) {
    case ChatFormat::kMlaserve: return "mlaserve";
    case ChatFormat::kDeepSeekV3: return "deepseek_v3";
    case ChatFormat::kKimiK2: return "kimi_k2";
  }
  return "unknown";
}

ChatFormat ChatFormatForModelType(std::string_view model_type) {
  if (model_type == "deepseek_v3" || model_type == "deepseek_v2") return ChatFormat::kDeepSeekV3;
  if (model_type == "kimi_k2" || model_type == "kimi_k25") return ChatFormat::kKimiK2;
  return ChatFormat::kMlaserve;
}

ChatFormat ChatFormatFor(const Tokenizer& tokenizer, std::string_view model_type) {
  if (tokenizer.TokenToId("<\xef\xbd\x9cUser\xef\xbd\x9c>")) return ChatFormat::kDeepSeekV3;  // <｜User｜>
  if (tokenizer.TokenToId("<|im_user|>")) return ChatFormat::kKimiK2;
  if (tokenizer.TokenToId("<|user|>")) return ChatFormat::kMlaserve;
  return ChatFormatForModelType(model_type);
}

}  // namespace mlaserve
