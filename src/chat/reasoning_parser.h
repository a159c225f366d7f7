// Reasoning models' output: the chain of thought, then the answer. `--reasoning-parser` names
// the format, as in SGLang (python/sglang/srt/parser/reasoning_parser.py):
//   deepseek-r1  the template ends the prompt with `<think>\n`, so the output starts inside the
//                reasoning (a `<think>` the model writes first anyway, as R1-0528 does, is
//                dropped) and `</think>` ends it. Without `</think>` it is all reasoning.
//   kimi         `◁think▷` at the very start of the output opens the reasoning, `◁/think▷`
//                ends it; output without the opening marker is all answer.
// The parser is incremental: Push pieces of text as they are generated, then Finish. Feeding a
// text whole or cut anywhere (even inside a UTF-8 character) gives the same concatenated
// reasoning and content. Nothing is trimmed: reasoning + end marker + content is the output
// minus the markers.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace mlaserve::chat {

enum class ReasoningFormat { kDeepSeekR1, kKimi };

// "deepseek-r1" or "kimi" (SGLang's names); an error names the value and the choices.
Result<ReasoningFormat> ReasoningFormatFromName(std::string_view name);
std::string_view ReasoningFormatName(ReasoningFormat format);

// What one Push or Finish adds to each side.
struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  // thinking: whether the prompt asked for reasoning. false (chat_template_kwargs
  // {"thinking": false} or {"enable_thinking": false}) makes deepseek-r1 start in the answer
  // like kimi: only an opening marker at the start then begins reasoning.
  explicit ReasoningParser(ReasoningFormat format, bool thinking = true);

  ReasoningSplit Push(std::string_view text);
  // Releases what was held back (a marker's beginning that never completed).
  ReasoningSplit Finish();

  // The whole text at once.
  static ReasoningSplit Split(ReasoningFormat format, std::string_view text, bool thinking = true);

 private:
  enum class State { kStart, kReasoning, kContent };
  std::string_view start_marker_, end_marker_;
  bool starts_in_reasoning_;
  State state_ = State::kStart;
  std::string pending_;  // received, not yet attributed: a possible marker's beginning
};

}  // namespace mlaserve::chat
