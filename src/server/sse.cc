#include "server/sse.h"

namespace mlaserve {

void SseParser::Feed(std::string_view bytes, FunctionRef<void(const SseEvent&)> on_event) {
  if (!checked_bom_) {
    // The BOM (EF BB BF) may itself arrive split; hold the first bytes until it is decided.
    static constexpr std::string_view kBom = "\xEF\xBB\xBF";
    line_.append(bytes);
    if (line_.size() < kBom.size() && kBom.substr(0, line_.size()) == line_) return;
    checked_bom_ = true;
    std::string held = std::move(line_);
    line_.clear();
    std::string_view rest(held);
    if (rest.substr(0, kBom.size()) == kBom) rest.remove_prefix(kBom.size());
    Feed(rest, on_event);
    return;
  }
  size_t start = 0;  // bytes[start..i) belong to the current line
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c != '\r' && c != '\n') {
      after_cr_ = false;
      continue;
    }
    if (c == '\n' && after_cr_ && i == start && line_.empty()) {
      // The '\n' of a "\r\n" whose '\r' already ended the line.
      after_cr_ = false;
      start = i + 1;
      continue;
    }
    line_.append(bytes.substr(start, i - start));
    after_cr_ = c == '\r';
    start = i + 1;
    ProcessLine(on_event);
  }
  line_.append(bytes.substr(start));
}

void SseParser::ProcessLine(FunctionRef<void(const SseEvent&)> on_event) {
  const std::string_view line(line_);
  if (line.empty()) {  // the event is complete
    if (has_data_) on_event(event_);
    has_data_ = false;
    event_.event.clear();
    event_.data.clear();
  } else if (line.front() != ':') {  // ':' starts a comment
    const size_t colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (field == "data") {
      if (has_data_) event_.data += '\n';
      event_.data.append(value);
      has_data_ = true;
    } else if (field == "event") {
      event_.event = std::string(value);
    } else if (field == "id") {
      if (value.find('\0') == std::string_view::npos) event_.id = std::string(value);
    }
  }
  line_.clear();
}

}  // namespace mlaserve
