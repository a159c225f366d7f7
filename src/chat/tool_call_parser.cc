#include "chat/tool_call_parser.h"

#include "chat/marker_scan.h"

namespace mlaserve::chat {
namespace {

// The markers of one format. DeepSeek-V3 fences the arguments as a JSON code block inside the
// call (`\n```json\n` ends the header, `\n```` precedes the call's end marker).
struct Markers {
  std::string_view section_begin, section_end, call_begin, call_end;
  std::string_view header_end;
  std::string_view closing;  // before call_end (DeepSeek's fence), or empty
};

constexpr Markers kDeepSeekV3{.section_begin = "<｜tool▁calls▁begin｜>",
                              .section_end = "<｜tool▁calls▁end｜>",
                              .call_begin = "<｜tool▁call▁begin｜>",
                              .call_end = "<｜tool▁call▁end｜>",
                              .header_end = "\n```json\n",
                              .closing = "\n```<｜tool▁call▁end｜>"};
constexpr Markers kKimiK2{.section_begin = "<|tool_calls_section_begin|>",
                          .section_end = "<|tool_calls_section_end|>",
                          .call_begin = "<|tool_call_begin|>",
                          .call_end = "<|tool_call_end|>",
                          .header_end = "<|tool_call_argument_begin|>",
                          .closing = ""};
constexpr std::string_view kDeepSeekSeparator = "<｜tool▁sep｜>";

// A header longer than this without its end marker is not a header.
constexpr size_t kMaxHeaderBytes = 512;

const Markers& MarkersOf(ToolCallFormat format) {
  return format == ToolCallFormat::kKimiK2 ? kKimiK2 : kDeepSeekV3;
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// The function name in a call's header, or empty when the header does not parse.
//   deepseekv3: TYPE<｜tool▁sep｜>NAME      kimi_k2: functions.NAME:IDX (or NAME:IDX)
std::string NameInHeader(ToolCallFormat format, std::string_view header) {
  if (format == ToolCallFormat::kDeepSeekV3) {
    const size_t sep = header.find(kDeepSeekSeparator);
    if (sep == std::string_view::npos) return "";
    return std::string(Trim(header.substr(sep + kDeepSeekSeparator.size())));
  }
  std::string_view id = Trim(header);
  if (id.starts_with("functions.")) id.remove_prefix(std::string_view("functions.").size());
  const size_t colon = id.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == id.size()) return "";
  for (char c : id.substr(colon + 1)) {
    if (c < '0' || c > '9') return "";
  }
  for (char c : id.substr(0, colon)) {
    if (IsSpace(c)) return "";
  }
  return std::string(id.substr(0, colon));
}

}  // namespace

Result<ToolCallFormat> ToolCallFormatFromName(std::string_view name) {
  if (name == "deepseekv3") return ToolCallFormat::kDeepSeekV3;
  if (name == "kimi_k2") return ToolCallFormat::kKimiK2;
  return Status::Error("unknown tool-call parser '" + std::string(name) + "' (want deepseekv3 or kimi_k2)");
}

ToolCallParser::ToolCallParser(ToolCallFormat format) : format_(format) {}

ToolCallDelta& ToolCallParser::DeltaFor(ToolCallOutput& out, size_t index) {
  if (out.calls.empty() || out.calls.back().index != index) out.calls.push_back({.index = index});
  return out.calls.back();
}

void ToolCallParser::Broken(ToolCallOutput& out) {
  out.content += section_raw_;
  out.content += pending_;
  section_raw_.clear();
  pending_.clear();
  state_ = State::kPlain;
}

bool ToolCallParser::StepHeader(ToolCallOutput& out) {
  const Markers& m = MarkersOf(format_);
  const size_t end = pending_.find(m.header_end);
  if (end == std::string::npos) {
    const bool foreign_marker = pending_.find(m.call_end) != std::string::npos ||
                                pending_.find(m.call_begin) != std::string::npos ||
                                pending_.find(m.section_end) != std::string::npos;
    if (foreign_marker || pending_.size() > kMaxHeaderBytes) Broken(out);
    return false;
  }
  std::string name = NameInHeader(format_, std::string_view(pending_).substr(0, end));
  if (name.empty()) {
    Broken(out);
    return false;
  }
  ToolCallDelta& delta = DeltaFor(out, calls_.size());
  delta.starts = true;
  delta.name = name;
  calls_.push_back({.name = std::move(name), .arguments = ""});
  pending_.erase(0, end + m.header_end.size());
  section_raw_.clear();  // the call stands from here on
  state_ = State::kArguments;
  return true;
}

bool ToolCallParser::StepArguments(ToolCallOutput& out) {
  const Markers& m = MarkersOf(format_);
  const size_t end = pending_.find(m.call_end);
  std::string_view piece = pending_;
  if (end == std::string::npos) {
    const size_t keep = m.closing.empty() ? HeldBackLength(pending_, {m.call_end})
                                          : HeldBackLength(pending_, {m.closing, m.call_end});
    piece.remove_suffix(keep);
  } else {
    piece = piece.substr(0, end);
    const std::string_view fence = m.closing.substr(0, m.closing.size() - m.call_end.size());
    if (!fence.empty() && piece.ends_with(fence)) piece.remove_suffix(fence.size());
  }
  if (!piece.empty()) {
    calls_.back().arguments.append(piece);
    DeltaFor(out, calls_.size() - 1).arguments.append(piece);
  }
  if (end == std::string::npos) {
    pending_.erase(0, piece.size());
    return false;
  }
  pending_.erase(0, end + m.call_end.size());
  state_ = State::kSection;
  return true;
}

bool ToolCallParser::Step(ToolCallOutput& out) {
  const Markers& m = MarkersOf(format_);
  switch (state_) {
    case State::kText: {
      const size_t begin = pending_.find(m.section_begin);
      if (begin == std::string::npos) {
        const size_t keep = HeldBackLength(pending_, {m.section_begin});
        out.content.append(pending_, 0, pending_.size() - keep);
        pending_.erase(0, pending_.size() - keep);
        return false;
      }
      out.content.append(pending_, 0, begin);
      section_raw_ = m.section_begin;
      pending_.erase(0, begin + m.section_begin.size());
      state_ = State::kSection;
      return true;
    }
    case State::kSection: {
      size_t spaces = 0;
      while (spaces < pending_.size() && IsSpace(pending_[spaces])) ++spaces;
      const std::string_view rest = std::string_view(pending_).substr(spaces);
      if (rest.starts_with(m.call_begin)) {
        section_raw_.append(pending_, 0, spaces + m.call_begin.size());
        pending_.erase(0, spaces + m.call_begin.size());
        state_ = State::kHeader;
        return true;
      }
      if (rest.starts_with(m.section_end)) {
        pending_.erase(0, spaces + m.section_end.size());
        section_raw_.clear();
        state_ = State::kText;
        return true;
      }
      if (!MayBecome(rest, m.call_begin) && !MayBecome(rest, m.section_end)) Broken(out);
      return false;
    }
    case State::kHeader:
      return StepHeader(out);
    case State::kArguments:
      return StepArguments(out);
    case State::kPlain:
      out.content += pending_;
      pending_.clear();
      return false;
  }
  return false;
}

ToolCallOutput ToolCallParser::Push(std::string_view text) {
  pending_.append(text);
  ToolCallOutput out;
  while (Step(out)) {
  }
  return out;
}

ToolCallOutput ToolCallParser::Finish() {
  ToolCallOutput out;
  while (Step(out)) {
  }
  switch (state_) {
    case State::kText:
    case State::kPlain:
      out.content += pending_;
      pending_.clear();
      break;
    case State::kSection:
    case State::kHeader:
      Broken(out);
      break;
    case State::kArguments:
      if (!pending_.empty()) {
        calls_.back().arguments += pending_;
        DeltaFor(out, calls_.size() - 1).arguments += pending_;
        pending_.clear();
      }
      break;
  }
  return out;
}

ToolCallParser::Parsed ToolCallParser::Parse(ToolCallFormat format, std::string_view text) {
  ToolCallParser parser(format);
  Parsed parsed;
  parsed.content = parser.Push(text).content;
  parsed.content += parser.Finish().content;
  parsed.calls = parser.calls();
  return parsed;
}

}  // namespace mlaserve::chat
