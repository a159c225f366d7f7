// Tool calls in a model's output text, as the model was trained to write them.
// `--tool-call-parser` names the format, as in SGLang (python/sglang/srt/function_call/
// deepseekv3_detector.py, kimik2_detector.py):
//   deepseekv3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n
//               ARGS\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   kimi_k2     <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
//               <|tool_call_argument_begin|>ARGS<|tool_call_end|>...<|tool_calls_section_end|>
// Text before the section (and after it) is content. Calls may be separated by whitespace.
//
// Incremental: Push pieces, then Finish. A call is reported (index and name) as soon as its
// header is complete, then its arguments as they arrive; feeding a text whole or cut anywhere
// gives the same content and calls. Arguments are the model's text between the markers, passed
// on as written (OpenAI's contract too: arguments are not guaranteed to be valid JSON).
// Malformed tool-call text never fails: from the point where the structure breaks (an
// unexpected marker or text where a call should begin, a header that does not parse, output
// that ends inside a header), the rest of the output is plain content, markers included; calls
// completed before that point stand.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mlaserve::chat {

enum class ToolCallFormat { kDeepSeekV3, kKimiK2 };

// "deepseekv3" or "kimi_k2" (SGLang's names); an error names the value and the choices.
Result<ToolCallFormat> ToolCallFormatFromName(std::string_view name);

struct ToolCall {
  std::string name;
  std::string arguments;  // as the model wrote them (JSON text, usually)
};

// A step of one call: `starts` (its first step) carries the name; every step may carry more
// argument text.
struct ToolCallDelta {
  size_t index = 0;  // position of the call in the output, from 0
  bool starts = false;
  std::string name;  // when starts
  std::string arguments;
};

struct ToolCallOutput {
  std::string content;
  std::vector<ToolCallDelta> calls;  // at most one entry per call index, in index order
};

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat format);

  ToolCallOutput Push(std::string_view text);
  // The end of the output: what was held back is released (an unfinished header as content,
  // an unfinished call's held-back argument text as arguments).
  ToolCallOutput Finish();

  // Every call reported so far, arguments complete up to what was reported.
  const std::vector<ToolCall>& calls() const { return calls_; }

  // The whole text at once.
  struct Parsed {
    std::string content;
    std::vector<ToolCall> calls;
  };
  static Parsed Parse(ToolCallFormat format, std::string_view text);

 private:
  enum class State {
    kText,       // content; looking for the section's opening marker
    kSection,    // inside the section, between calls
    kHeader,     // after a call's opening marker, before its arguments
    kArguments,  // inside a call's arguments
    kPlain,      // the structure broke: the rest is content
  };
  // Advances as far as pending_ allows; false when it needs more text.
  bool Step(ToolCallOutput& out);
  bool StepHeader(ToolCallOutput& out);
  bool StepArguments(ToolCallOutput& out);
  void Broken(ToolCallOutput& out);
  ToolCallDelta& DeltaFor(ToolCallOutput& out, size_t index);

  ToolCallFormat format_;
  State state_ = State::kText;
  std::string pending_;     // received, not yet attributed
  std::string section_raw_; // the section's text consumed since the last complete call (for Broken)
  std::vector<ToolCall> calls_;
};

}  // namespace mlaserve::chat
