// ChatTemplate: finds a model's Jinja chat template, builds the template variables the way
// Hugging Face's apply_chat_template does (messages, add_generation_prompt, the special tokens,
// then the caller's kwargs), and falls back to the built-in formats.
#include "tokenizer/chat_template.h"

#include "model/gguf_model.h"
#include "tokenizer/gguf_tokenizer.h"

#include <filesystem>

#include "core/read_file.h"
#include "tokenizer/json_fields.h"

namespace mlaserve {
namespace {

// Real chat templates are a few KB; tokenizer_config.json can carry thousands of added tokens.
constexpr size_t kMaxTemplateFileBytes = 4u << 20;
constexpr size_t kMaxTokenizerConfigBytes = 64u << 20;

// tokenizer_config.json's chat_template: a string, or [{"name": ..., "template": ...}] (the
// "default" entry is the chat template; "tool_use" and others are not used).
Result<std::optional<std::string>> TemplateFromConfig(const nlohmann::json& config, const std::string& source) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return std::optional<std::string>(entry["template"].get<std::string>());
      }
    }
    return Status::Error(source + ": chat_template is a list without a \"default\" template");
  }
  return Status::Error(source + ": chat_template must be a string or a list of {name, template}");
}

// bos_token, eos_token, unk_token, pad_token as strings (a string or {"content": ...}).
nlohmann::json SpecialTokens(const nlohmann::json& config) {
  nlohmann::json tokens = nlohmann::json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    auto it = config.find(key);
    if (it == config.end()) continue;
    if (it->is_string()) tokens[key] = *it;
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) tokens[key] = (*it)["content"];
  }
  return tokens;
}

// For the built-in formats: role and text of each message (content null or absent is empty).
template <typename Json>
Result<std::vector<ChatMessage>> PlainMessages(const Json& messages) {
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string where = "chat message " + std::to_string(i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) return Status::Error(where + " needs a 'role' string");
    ChatMessage message{m["role"].template get<std::string>(), ""};
    if (m.contains("content") && m["content"].is_string()) {
      message.content = m["content"].template get<std::string>();
    } else if (m.contains("content") && !m["content"].is_null()) {
      return Status::Error(where + ": the built-in chat format takes text content only");
    }
    out.push_back(std::move(message));
  }
  return out;
}

}  // namespace

ChatTemplate ChatTemplate::Builtin(ChatFormat format) {
  ChatTemplate t;
  t.format_ = format;
  t.origin_ = "built-in " + std::string(ChatFormatName(format));
  return t;
}

Result<ChatTemplate> ChatTemplate::FromJinja(std::string_view source, std::string origin, nlohmann::json special_tokens) {
  auto parsed = jinja::Template::Parse(source);
  if (!parsed.ok()) return Status::Error(origin + ": chat template " + parsed.error());
  ChatTemplate t;
  t.jinja_ = std::move(parsed).value();
  t.origin_ = std::move(origin);
  t.source_ = std::string(source);
  t.special_tokens_ = std::move(special_tokens);
  return t;
}

Result<ChatTemplate> ChatTemplate::ForModel(const std::string& model_dir, const std::string& override_file,
                                            const Tokenizer& tokenizer, std::string_view model_type) {
  nlohmann::json config = nlohmann::json::object();
  const bool gguf = !model_dir.empty() && IsGgufFile(model_dir);
  const std::string config_path = gguf ? model_dir + " (tokenizer.chat_template)" : model_dir + "/tokenizer_config.json";
  if (gguf) {
    auto f = ReadGgufFile(model_dir);
    if (!f.ok()) return f.status();
    auto text = HfTokenizerConfigFromGguf(*f, model_dir);
    if (!text.ok()) return text.status();
    config = nlohmann::json::parse(*text);
  } else if (!model_dir.empty() && std::filesystem::exists(config_path)) {
    auto text = ReadTextFile(config_path, kMaxTokenizerConfigBytes);
    if (!text.ok()) return text.status();
    auto parsed = ParseJsonText(*text, config_path);
    if (!parsed.ok()) return parsed.status();
    if (parsed->is_object()) config = std::move(parsed).value();
  }
  nlohmann::json tokens = SpecialTokens(config);
  if (!override_file.empty()) {
    auto text = ReadTextFile(override_file, kMaxTemplateFileBytes);
    if (!text.ok()) return text.status();
    return FromJinja(*text, override_file, std::move(tokens));
  }
  const std::string jinja_path = model_dir + "/chat_template.jinja";
  if (!gguf && !model_dir.empty() && std::filesystem::exists(jinja_path)) {
    auto text = ReadTextFile(jinja_path, kMaxTemplateFileBytes);
    if (!text.ok()) return text.status();
    return FromJinja(*text, jinja_path, std::move(tokens));
  }
  auto from_config = TemplateFromConfig(config, config_path);
  if (!from_config.ok()) return from_config.status();
  if (*from_config) return FromJinja(**from_config, config_path, std::move(tokens));
  return Builtin(ChatFormatFor(tokenizer, model_type));
}

Result<std::string> ChatTemplate::Render(const nlohmann::json& messages, bool add_generation_prompt,
                                         const nlohmann::json& kwargs) const {
  return RenderJson(messages, add_generation_prompt, kwargs);
}

Result<std::string> ChatTemplate::Render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                         const nlohmann::ordered_json& kwargs) const {
  return RenderJson(messages, add_generation_prompt, kwargs);
}

template <typename Json>
Result<std::string> ChatTemplate::RenderJson(const Json& messages, bool add_generation_prompt, const Json& kwargs) const {
  if (!messages.is_array()) return Status::Error("chat messages must be a list");
  if (!kwargs.is_null() && !kwargs.is_object()) return Status::Error("chat template arguments must be an object");
  if (!jinja_) {
    auto plain = PlainMessages(messages);
    if (!plain.ok()) return plain.status();
    return ApplyChatTemplate(format_, *plain, add_generation_prompt);
  }
  jinja::Value variables = jinja::Value::MakeDict();
  jinja::Dict& vars = variables.dict();
  vars.Set("messages", jinja::Value::FromJson(messages));
  vars.Set("add_generation_prompt", jinja::Value(add_generation_prompt));
  for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it) vars.Set(it.key(), jinja::Value::FromJson(it.value()));
  if (kwargs.is_object()) {
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
      if (it.key() == "messages" || it.key() == "add_generation_prompt") {
        return Status::Error("chat template argument '" + it.key() + "' is set by the server");
      }
      vars.Set(it.key(), jinja::Value::FromJson(it.value()));
    }
  }
  auto text = jinja_->Render(variables);
  if (!text.ok()) return Status::Error(origin_ + ": chat template " + text.error());
  return text;
}

Result<std::string> ChatTemplate::Render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  if (!jinja_) return ApplyChatTemplate(format_, messages, add_generation_prompt);
  nlohmann::json list = nlohmann::json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  return Render(list, add_generation_prompt);
}

}  // namespace mlaserve
