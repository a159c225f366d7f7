#include "chat/chat_output.h"

namespace mlaserve::chat {

ChatOutputParser::ChatOutputParser(std::optional<ReasoningParser> reasoning, std::optional<ToolCallFormat> tools)
    : reasoning_(std::move(reasoning)) {
  if (tools) tools_.emplace(*tools);
}

ChatDelta ChatOutputParser::Route(ReasoningSplit split, bool finish) {
  ChatDelta delta{.reasoning = std::move(split.reasoning), .content = "", .calls = {}};
  if (!tools_) {
    delta.content = std::move(split.content);
    return delta;
  }
  ToolCallOutput out = tools_->Push(split.content);
  if (finish) {
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

ChatDelta ChatOutputParser::Push(std::string_view text) {
  if (!reasoning_) return Route({.reasoning = "", .content = std::string(text)}, /*finish=*/false);
  return Route(reasoning_->Push(text), /*finish=*/false);
}

ChatDelta ChatOutputParser::Finish() {
  if (!reasoning_) return Route({}, /*finish=*/true);
  return Route(reasoning_->Finish(), /*finish=*/true);
}

const std::vector<ToolCall>& ChatOutputParser::calls() const {
  static const std::vector<ToolCall> kNone;
  return tools_ ? tools_->calls() : kNone;
}

}  // namespace mlaserve::chat
