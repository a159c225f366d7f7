// One assistant reply as it streams out of the engine, split the way an OpenAI chat response
// reports it: reasoning (reasoning_content), the answer (content) and tool calls. The reasoning
// parser sees the text first; what it calls the answer goes through the tool-call parser (as in
// SGLang's serving_chat.py). Either parser may be absent: its side then passes text through.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/reasoning_parser.h"
#include "chat/tool_call_parser.h"

namespace mlaserve::chat {

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

class ChatOutputParser {
 public:
  ChatOutputParser(std::optional<ReasoningParser> reasoning, std::optional<ToolCallFormat> tools);

  // `text`: the next piece of the reply; last: the reply ends with it (what was held back is
  // released).
  ChatDelta Push(std::string_view text, bool last);
  // The calls reported so far (empty without a tool-call parser).
  const std::vector<ToolCall>& calls() const;

 private:
  ChatDelta Route(ReasoningSplit split, bool last);

  std::optional<ReasoningParser> reasoning_;
  std::optional<ToolCallParser> tools_;
};

}  // namespace mlaserve::chat
