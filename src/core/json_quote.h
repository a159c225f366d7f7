// A JSON value as an error line quotes it: its JSON text (invalid UTF-8 replaced, never a
// throw), cut short when long, so a refusal stays one readable line whatever the input held.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace mlaserve {

inline std::string QuoteJson(const nlohmann::json& v) {
  std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 60) + "...";
  return text;
}

// A name read from a file (a tensor's, a key) as an error line quotes it: control characters
// become '?' and a long name is cut short, so the line stays one line.
inline std::string PrintableName(std::string_view name) {
  std::string out(name.substr(0, 200));
  for (char& ch : out) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  }
  return name.size() > 200 ? out + "..." : out;
}

}  // namespace mlaserve
