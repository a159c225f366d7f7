// Scanning streamed text for fixed markers (`</think>`, `<|tool_call_end|>`): a marker may arrive
// cut across pieces, so a parser holds back the end of its text while it could still begin one.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string_view>

namespace mlaserve::chat {

// The length of the longest suffix of `text` that is a proper prefix of one of `markers`
// (0 when no suffix could begin a marker): the bytes to hold back until more text arrives.
inline size_t HeldBackLength(std::string_view text, std::initializer_list<std::string_view> markers) {
  size_t held = 0;
  for (std::string_view marker : markers) {
    const size_t longest = std::min(text.size(), marker.size() - 1);
    for (size_t n = longest; n > held; --n) {
      if (text.substr(text.size() - n) == marker.substr(0, n)) {
        held = n;
        break;
      }
    }
  }
  return held;
}

// Whether `text` is a proper prefix of `marker` (it may still become the marker).
inline bool MayBecome(std::string_view text, std::string_view marker) {
  return text.size() < marker.size() && marker.substr(0, text.size()) == text;
}

}  // namespace mlaserve::chat
