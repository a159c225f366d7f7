#include "engine/stop_matcher.h"

#include <algorithm>

namespace mlaserve {

StopMatcher::StopMatcher(std::span<const std::string> stop_strings, bool keep_stop_string)
    : keep_stop_string_(keep_stop_string) {
  patterns_.reserve(stop_strings.size());
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    if (stop_strings[i].empty()) continue;
    Pattern& p = patterns_.emplace_back();
    p.bytes = stop_strings[i];
    p.index = int(i);
    p.border.assign(p.bytes.size(), 0);
    uint32_t k = 0;
    for (size_t j = 1; j < p.bytes.size(); ++j) {
      while (k > 0 && p.bytes[j] != p.bytes[k]) k = p.border[k - 1];
      if (p.bytes[j] == p.bytes[k]) ++k;
      p.border[j] = k;
    }
  }
}

std::string_view StopMatcher::Release(size_t end) {
  const size_t begin = released_bytes_;
  released_bytes_ = std::max(end, begin);
  return std::string_view(text_).substr(begin, released_bytes_ - begin);
}

std::string_view StopMatcher::Push(std::string_view piece) {
  if (stopped() || finished_) return {};
  for (char c : piece) {
    text_.push_back(c);
    const Pattern* match = nullptr;
    for (Pattern& p : patterns_) {
      while (p.matched > 0 && p.bytes[p.matched] != c) p.matched = p.border[p.matched - 1];
      if (p.bytes[p.matched] == c) ++p.matched;
      if (p.matched == p.bytes.size() && (match == nullptr || p.bytes.size() > match->bytes.size())) {
        match = &p;
      }
    }
    if (match != nullptr) {
      matched_index_ = match->index;
      const size_t match_end = text_.size();
      text_.resize(keep_stop_string_ ? match_end : match_end - match->bytes.size());
      return Release(text_.size());
    }
  }
  uint32_t held = 0;
  for (const Pattern& p : patterns_) held = std::max(held, p.matched);
  return Release(text_.size() - held);
}

std::string_view StopMatcher::Finish() {
  if (finished_) return {};
  finished_ = true;
  return Release(text_.size());
}

}  // namespace mlaserve
