#include "chat/chat_output.h"

namespace mlaserve::chat {

ChatOutputParser::ChatOutputParser(std::optional<ReasoningParser> reasoning, std::optional<ToolCallFormat> tools)
    : reasoning_(std::move(reasoning)) {
  if (tools) tools_.emplace(*tools);
}

ChatDelta ChatOutputParser::Route(ReasoningSplit split, bool last) {
  ChatDelta delta{.reasoning = std::move(split.reasoning), .content = "", .calls = {}};
  if (!tools_) {
    delta.content = std::move(split.content);
    return delta;
  }
  ToolCallOutput out = tools_->Push(split.content);
  if (last) {
    ToolCallOutput rest = tools_->Finish();
    out.content += rest.content;
    for (ToolCallDelta& d : rest.calls) {
      if (!out.calls.empty() && out.calls.back().index == d.index) {
        out.calls.back().arguments += d.arguments;
      } else {
        out.calls.push_back(std::move(d));
      }
    }
  }
  delta.content = std::move(out.content);
  delta.calls = std::move(out.calls);
  return delta;
}

ChatDelta ChatOutputParser::Push(std::string_view text, bool last) {
  if (!reasoning_) return Route({.reasoning = "", .content = std::string(text)}, last);
  ReasoningSplit split = reasoning_->Push(text);
  if (last) {
    ReasoningSplit rest = reasoning_->Finish();
    split.reasoning += rest.reasoning;
    split.content += rest.content;
  }
  return Route(std::move(split), last);
}

const std::vector<ToolCall>& ChatOutputParser::calls() const {
  static const std::vector<ToolCall> kNone;
  return tools_ ? tools_->calls() : kNone;
}

}  // namespace mlaserve::chat
