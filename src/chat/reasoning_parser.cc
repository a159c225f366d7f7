#include "chat/reasoning_parser.h"

#include "chat/marker_scan.h"

namespace mlaserve::chat {

Result<ReasoningFormat> ReasoningFormatFromName(std::string_view name) {
  if (name == "deepseek-r1") return ReasoningFormat::kDeepSeekR1;
  if (name == "kimi") return ReasoningFormat::kKimi;
  return Status::Error("unknown reasoning parser '" + std::string(name) + "' (want deepseek-r1 or kimi)");
}

std::string_view ReasoningFormatName(ReasoningFormat format) {
  return format == ReasoningFormat::kKimi ? "kimi" : "deepseek-r1";
}

ReasoningParser::ReasoningParser(ReasoningFormat format, bool thinking)
    : start_marker_(format == ReasoningFormat::kKimi ? "◁think▷" : "<think>"),
      end_marker_(format == ReasoningFormat::kKimi ? "◁/think▷" : "</think>"),
      starts_in_reasoning_(format == ReasoningFormat::kDeepSeekR1 && thinking) {}

ReasoningSplit ReasoningParser::Push(std::string_view text) {
  pending_.append(text);
  ReasoningSplit out;
  if (state_ == State::kStart) {
    if (MayBecome(pending_, start_marker_)) return out;
    if (pending_.starts_with(start_marker_)) {
      pending_.erase(0, start_marker_.size());
      state_ = State::kReasoning;
    } else {
      state_ = starts_in_reasoning_ ? State::kReasoning : State::kContent;
    }
  }
  if (state_ == State::kReasoning) {
    const size_t end = pending_.find(end_marker_);
    if (end == std::string::npos) {
      const size_t keep = HeldBackLength(pending_, {end_marker_});
      out.reasoning = pending_.substr(0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
      return out;
    }
    out.reasoning = pending_.substr(0, end);
    pending_.erase(0, end + end_marker_.size());
    state_ = State::kContent;
  }
  out.content = std::move(pending_);
  pending_.clear();
  return out;
}

ReasoningSplit ReasoningParser::Finish() {
  ReasoningSplit out;
  const bool reasoning = state_ == State::kReasoning || (state_ == State::kStart && starts_in_reasoning_);
  (reasoning ? out.reasoning : out.content) = std::move(pending_);
  pending_.clear();
  return out;
}

ReasoningSplit ReasoningParser::Split(ReasoningFormat format, std::string_view text, bool thinking) {
  ReasoningParser parser(format, thinking);
  ReasoningSplit out = parser.Push(text);
  ReasoningSplit rest = parser.Finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

}  // namespace mlaserve::chat
