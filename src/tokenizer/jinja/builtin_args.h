// Argument access for builtin filters, tests, methods and functions: positional-or-keyword
// lookup and type checks that fail with the caller's line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/jinja/interpreter.h"

namespace mlaserve::jinja {

// The argument at `index` or named `name`; undefined when absent.
inline Value Arg(const CallArgs& args, size_t index, std::string_view name) {
  for (const auto& [key, value] : args.keyword) {
    if (key == name) return value;
  }
  return index < args.positional.size() ? args.positional[index] : Value();
}

inline const std::string& ExpectString(const Value& v, std::string_view what, int line) {
  if (!v.is_string()) {
    Interpreter::Fail(line, std::string(what) + " needs a string, got " + std::string(v.TypeName()));
  }
  return v.as_string();
}

inline bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's str.strip / lstrip / rstrip: whitespace, or any of `chars` when given.
inline std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  const auto strip_char = [&](char c) {
    return chars.is_string() ? chars.as_string().find(c) != std::string::npos : IsAsciiSpace(c);
  };
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end && strip_char(s[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip_char(s[end - 1])) --end;
  }
  return s.substr(begin, end - begin);
}

// How many replacements Python's str.replace(old, new[, count]) makes.
inline size_t CountReplacements(const std::string& s, const std::string& from, int64_t count) {
  if (from.empty()) return 0;  // Replace leaves s as it is
  size_t hits = 0;
  for (size_t pos = s.find(from); pos != std::string::npos && (count < 0 || int64_t(hits) < count);
       pos = s.find(from, pos + from.size())) {
    ++hits;
  }
  return hits;
}

// Python's str.replace(old, new[, count]).
inline std::string Replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  if (from.empty()) return s;  // Python inserts between characters; no chat template relies on it
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// `s.replace(old, new[, count])` and `s | replace(old, new[, count])`: the result's size is
// known (and checked) before it is built.
inline Value ReplaceCall(Interpreter& in, const std::string& s, const CallArgs& args) {
  const Value count_v = Arg(args, 2, "count");
  const int64_t count = count_v.is_int() ? count_v.as_int() : -1;
  const std::string& from = ExpectString(Arg(args, 0, "old"), "replace", args.line);
  const std::string& to = ExpectString(Arg(args, 1, "new"), "replace", args.line);
  in.Step(args.line, int64_t(s.size() / 256));
  const size_t hits = CountReplacements(s, from, count);
  size_t size = 0;
  if (__builtin_mul_overflow(hits, to.size(), &size) || __builtin_add_overflow(size, s.size(), &size)) size = SIZE_MAX;
  in.CheckSize(size - hits * from.size(), args.line);  // s.size() >= hits * from.size(): no underflow
  return Value(Replace(s, from, to, count));
}

// ASCII case mapping as Python's str methods do it for ASCII text (methods.cc).
std::string Upper(const std::string& s);
std::string Lower(const std::string& s);
std::string Title(const std::string& s);
std::string Capitalize(const std::string& s);

}  // namespace mlaserve::jinja
