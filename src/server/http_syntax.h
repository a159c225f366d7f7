// Small pieces of HTTP/1.1 grammar (RFC 9110 section 5.6) shared by the parser and the response
// writer. ASCII only, locale-free.
#pragma once

#include <cstddef>
#include <string_view>

namespace mlaserve {

// tchar: the characters of methods, header names and transfer codings.
inline bool IsHttpTokenChar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

inline bool IsHttpToken(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!IsHttpTokenChar(c)) return false;
  }
  return true;
}

inline char ToLowerAscii(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

inline bool EqualsIgnoreCaseAscii(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ToLowerAscii(a[i]) != ToLowerAscii(b[i])) return false;
  }
  return true;
}

}  // namespace mlaserve
