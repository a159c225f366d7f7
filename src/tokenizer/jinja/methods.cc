// Python methods templates call on values: str (startswith, endswith, strip, split, replace,
// upper, lower, ...), dict (items, keys, values, get). Mutating list methods are absent, as in
// Hugging Face's immutable sandbox.
#include <algorithm>

#include "tokenizer/jinja/builtin_args.h"

namespace mlaserve::jinja {
namespace {

constexpr std::string_view kStringMethods[] = {"startswith", "endswith", "strip",  "lstrip", "rstrip",
                                               "split",      "rsplit",   "upper",  "lower",  "title",
                                               "capitalize", "replace",  "find",   "count",  "join"};
constexpr std::string_view kDictMethods[] = {"items", "keys", "values", "get"};

bool MatchesAffix(const std::string& s, const Value& affix, bool prefix, int line) {
  const auto one = [&](const Value& a) {
    const std::string& x = ExpectString(a, prefix ? "startswith" : "endswith", line);
    return prefix ? s.starts_with(x) : s.ends_with(x);
  };
  if (affix.is_list()) return std::any_of(affix.list().begin(), affix.list().end(), one);
  return one(affix);
}

// Python's str.split(sep=None, maxsplit=-1).
List Split(const std::string& s, const Value& sep, int64_t maxsplit, int line) {
  List out;
  if (sep.is_undefined() || sep.is_none()) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && IsAsciiSpace(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        size_t end = s.size();
        while (end > i && IsAsciiSpace(s[end - 1])) --end;
        out.emplace_back(s.substr(i, end - i));
        break;
      }
      const size_t start = i;
      while (i < s.size() && !IsAsciiSpace(s[i])) ++i;
      out.emplace_back(s.substr(start, i - start));
    }
    return out;
  }
  const std::string& delim = ExpectString(sep, "split", line);
  if (delim.empty()) Interpreter::Fail(line, "split: empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
    const size_t hit = s.find(delim, pos);
    if (hit == std::string::npos) break;
    out.emplace_back(s.substr(pos, hit - pos));
    pos = hit + delim.size();
  }
  out.emplace_back(s.substr(pos));
  return out;
}

std::string CaseMap(const std::string& s, bool upper) {
  std::string out = s;
  for (char& c : out) {
    if (upper && c >= 'a' && c <= 'z') c = char(c - 32);
    if (!upper && c >= 'A' && c <= 'Z') c = char(c + 32);
  }
  return out;
}

}  // namespace

std::string Title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (letter) c = prev_cased ? char(std::tolower(c)) : char(std::toupper(c));
    prev_cased = letter;
  }
  return out;
}

std::string Capitalize(const std::string& s) {
  std::string out = CaseMap(s, false);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = char(out[0] - 32);
  return out;
}

std::string Upper(const std::string& s) { return CaseMap(s, true); }
std::string Lower(const std::string& s) { return CaseMap(s, false); }

bool HasMethod(const Value& object, std::string_view name) {
  if (object.is_string()) return std::find(std::begin(kStringMethods), std::end(kStringMethods), name) != std::end(kStringMethods);
  if (object.is_dict()) return std::find(std::begin(kDictMethods), std::end(kDictMethods), name) != std::end(kDictMethods);
  return false;
}

Value CallMethod(Interpreter& in, const Value& object, const std::string& name, CallArgs& args) {
  const int line = args.line;
  if (object.is_dict()) {
    const Dict& d = object.dict();
    in.Step(line, int64_t(d.items.size()));
    if (name == "get") {
      const Value key = Arg(args, 0, "key");
      const Value* v = key.is_string() ? d.Find(key.as_string()) : nullptr;
      if (v) return *v;
      const Value fallback = Arg(args, 1, "default");
      return fallback.is_undefined() ? Value::None() : fallback;
    }
    List out;
    for (const auto& [k, v] : d.items) {
      if (name == "items") out.push_back(Value::MakeList({Value(k), v}));
      if (name == "keys") out.emplace_back(k);
      if (name == "values") out.push_back(v);
    }
    return Value::MakeList(std::move(out));
  }
  const std::string& s = object.as_string();
  in.Step(line, int64_t(s.size() / 64));
  if (name == "startswith" || name == "endswith") return Value(MatchesAffix(s, Arg(args, 0, "prefix"), name == "startswith", line));
  if (name == "strip") return Value(Strip(s, Arg(args, 0, "chars"), true, true));
  if (name == "lstrip") return Value(Strip(s, Arg(args, 0, "chars"), true, false));
  if (name == "rstrip") return Value(Strip(s, Arg(args, 0, "chars"), false, true));
  if (name == "upper") return Value(Upper(s));
  if (name == "lower") return Value(Lower(s));
  if (name == "title") return Value(Title(s));
  if (name == "capitalize") return Value(Capitalize(s));
  if (name == "split" || name == "rsplit") {
    const Value max = Arg(args, 1, "maxsplit");
    if (name == "rsplit" && max.is_int() && max.as_int() >= 0) Interpreter::Fail(line, "rsplit with maxsplit is not supported");
    return Value::MakeList(Split(s, Arg(args, 0, "sep"), max.is_int() ? max.as_int() : -1, line));
  }
  if (name == "replace") return ReplaceCall(in, s, args);
  if (name == "find") {
    const size_t hit = s.find(ExpectString(Arg(args, 0, "sub"), "find", line));
    return Value(hit == std::string::npos ? int64_t{-1} : int64_t(CodePoints(s.substr(0, hit)).size()));
  }
  if (name == "count") {
    const std::string sub = ExpectString(Arg(args, 0, "sub"), "count", line);
    if (sub.empty()) return Value(int64_t(CodePoints(s).size() + 1));
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    const Value items = Arg(args, 0, "iterable");
    if (!items.is_list()) Interpreter::Fail(line, "join needs a list");
    std::string out;
    for (size_t i = 0; i < items.list().size(); ++i) {
      if (i) out += s;
      out += ExpectString(items.list()[i], "join", line);
      in.CheckSize(out.size(), line);
    }
    return Value(std::move(out));
  }
  Interpreter::Fail(line, "a string has no method '" + name + "'");
}

}  // namespace mlaserve::jinja
