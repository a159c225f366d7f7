#include "server/chat_request.h"

#include <string>

#include "server/client_json.h"

namespace mlaserve {

using nlohmann::json;

namespace {

// An assistant message's earlier tool calls, as the template receives them: OpenAI's shape,
// {"id", "type": "function", "function": {"name", "arguments"}}, with arguments the JSON text the
// client sent (DeepSeek's template concatenates it; Kimi's writes a string as it is).
// A call without "type" gets "function" (DeepSeek's template writes it), as SGLang's request
// model fills it in.
Result<json> ReadToolCalls(const json& calls, const std::string& where) {
  if (!calls.is_array()) return Status::Error(where + "'tool_calls' must be a list");
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& call = calls[i];
    const std::string at = where + "tool_calls[" + std::to_string(i) + "]: ";
    if (!call.is_object()) return Status::Error(at + "each tool call must be an object");
    MLA_RETURN_IF_ERROR(CheckFields(call, {{"id"}, {"type"}, {"function"}}, at));
    if (!call.contains("id") || !call["id"].is_string()) return Status::Error(at + "'id' must be a string");
    if (call.contains("type") && call["type"] != "function") return Status::Error(at + "'type' must be \"function\"");
    if (!call.contains("function") || !call["function"].is_object()) return Status::Error(at + "'function' must be an object");
    const json& function = call["function"];
    MLA_RETURN_IF_ERROR(CheckFields(function, {{"name"}, {"arguments"}}, at + "function: "));
    if (!function.contains("name") || !function["name"].is_string()) return Status::Error(at + "'function.name' must be a string");
    if (!function.contains("arguments") || !function["arguments"].is_string()) {
      return Status::Error(at + "'function.arguments' must be a string (JSON text, as OpenAI sends it)");
    }
    out.push_back(call);
    out.back()["type"] = "function";
  }
  return out;
}

}  // namespace

Result<json> ReadChatTools(const json& body) {
  const json choice = body.contains("tool_choice") ? body["tool_choice"] : json();
  if (choice.is_object()) {
    const json& function = choice.contains("function") ? choice["function"] : json();
    const std::string name = function.is_object() && function.contains("name") && function["name"].is_string()
                                 ? function["name"].get<std::string>() : "?";
    return Status::Error("'tool_choice' naming a function ('" + name +
                         "') is not implemented: forcing a call needs constrained decoding");
  }
  if (!choice.is_null() && !choice.is_string()) return Status::Error("'tool_choice' must be a string or an object");
  const std::string mode = choice.is_string() ? choice.get<std::string>() : "auto";
  if (mode == "required") {
    return Status::Error("'tool_choice' \"required\" is not implemented: forcing a call needs constrained decoding");
  }
  if (mode != "auto" && mode != "none") {
    return Status::Error("'tool_choice' \"" + mode + "\" is not one of \"none\", \"auto\", \"required\"");
  }
  if (!body.contains("tools") || body["tools"].is_null()) return json();
  const json& tools = body["tools"];
  if (!tools.is_array()) return Status::Error("'tools' must be a list");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]: ";
    const json& tool = tools[i];
    if (!tool.is_object()) return Status::Error(at + "each tool must be an object");
    MLA_RETURN_IF_ERROR(CheckFields(tool, {{"type"}, {"function"}}, at));
    if (!tool.contains("type") || tool["type"] != "function") return Status::Error(at + "'type' must be \"function\"");
    if (!tool.contains("function") || !tool["function"].is_object()) return Status::Error(at + "'function' must be an object");
    const json& function = tool["function"];
    MLA_RETURN_IF_ERROR(CheckFields(function, {{"name"}, {"description"}, {"parameters"},
                                               {"strict", "strict schemas need constrained decoding, which is not "
                                                          "implemented", "false"}},
                                    at + "function: "));
    if (!function.contains("name") || !function["name"].is_string() || function["name"].get_ref<const std::string&>().empty()) {
      return Status::Error(at + "'function.name' must be a non-empty string");
    }
  }
  if (mode == "none" || tools.empty()) return json();
  return tools;
}

size_t CountToolCalls(const json& messages) {
  size_t n = 0;
  for (const json& m : messages) {
    if (m.contains("tool_calls")) n += m["tool_calls"].size();
  }
  return n;
}

bool ThinkingTurnedOff(const json& kwargs) {
  if (!kwargs.is_object()) return false;
  for (const char* key : {"thinking", "enable_thinking"}) {
    if (kwargs.contains(key) && kwargs[key] == false) return true;
  }
  return false;
}

Result<json> ReadChatMessages(const json& body) {
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty()) {
    return Status::Error("'messages' must be a non-empty list");
  }
  json messages = json::array();
  for (size_t i = 0; i < body["messages"].size(); ++i) {
    const json& m = body["messages"][i];
    const std::string where = "messages[" + std::to_string(i) + "]: ";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return Status::Error(where + "each message needs a 'role' string");
    }
    MLA_RETURN_IF_ERROR(CheckFields(m, {{"role"}, {"content"}, {"name"}, {"tool_calls"}, {"tool_call_id"},
                                        {"reasoning_content"}},
                                    where));
    json msg = {{"role", m["role"]}};
    for (const char* key : {"name", "reasoning_content", "tool_call_id"}) {
      if (!m.contains(key) || m[key].is_null()) continue;
      if (!m[key].is_string()) return Status::Error(where + "'" + key + "' must be a string");
      msg[key] = m[key];
    }
    if (msg.contains("tool_call_id") && m["role"] != "tool") {
      return Status::Error(where + "'tool_call_id' belongs to \"tool\" messages");
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (m["role"] != "assistant") return Status::Error(where + "'tool_calls' belongs to \"assistant\" messages");
      auto calls = ReadToolCalls(m["tool_calls"], where);
      if (!calls.ok()) return calls.status();
      msg["tool_calls"] = std::move(calls).value();
    }
    if (!m.contains("content") || m["content"].is_null()) {
      msg["content"] = nullptr;
      messages.push_back(std::move(msg));
      continue;
    }
    const json& c = m["content"];
    std::string text;
    if (c.is_string()) {
      text = c.get<std::string>();
    } else if (c.is_array()) {
      for (size_t k = 0; k < c.size(); ++k) {
        const json& part = c[k];
        const json type = part.is_object() && part.contains("type") ? part["type"] : json();
        if (type.is_string() && type != "text") {
          // image_url, input_image, video_url, input_audio, file...
          return Status::Error(where + "'" + type.get<std::string>() +
                               "' content parts are not supported: mlaserve runs text models only (a "
                               "multimodal checkpoint such as Kimi-K2.5 is served without its vision tower)");
        }
        if (type != "text" || !part.contains("text") || !part["text"].is_string()) {
          return Status::Error(where + "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
        }
        // OpenAI's text part has nothing else; a key beside them (Anthropic's cache_control, a
        // typo) is refused as a message's own unknown keys are.
        MLA_RETURN_IF_ERROR(CheckFields(part, {{"type"}, {"text"}}, where + "content[" + std::to_string(k) + "]: "));
        text += part["text"].get<std::string>();
      }
    } else {
      return Status::Error(where + "message 'content' must be a string or a list of text parts");
    }
    msg["content"] = std::move(text);
    messages.push_back(std::move(msg));
  }
  return messages;
}

}  // namespace mlaserve
