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

// Python's str.split(sep=None, maxsplit=-1): calls piece(begin, end) for each part's bytes.
template <typename Piece>
void SplitPieces(const std::string& s, const Value& sep, int64_t maxsplit, int line, Piece piece) {
  int64_t count = 0;
  if (sep.is_undefined() || sep.is_none()) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && IsAsciiSpace(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && count == maxsplit) {
        piece(i, s.size());  // Python keeps the remainder's trailing whitespace
        break;
      }
      const size_t start = i;
      while (i < s.size() && !IsAsciiSpace(s[i])) ++i;
      piece(start, i);
      ++count;
    }
    return;
  }
  const std::string& delim = ExpectString(sep, "split", line);
  if (delim.empty()) Interpreter::Fail(line, "split: empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || count < maxsplit) {
    const size_t hit = s.find(delim, pos);
    if (hit == std::string::npos) break;
    piece(pos, hit);
    ++count;
    pos = hit + delim.size();
  }
  piece(pos, s.size());
}

// The parts are counted (and the list checked) before any is built.
Value Split(Interpreter& in, const std::string& s, const Value& sep, int64_t maxsplit, int line) {
  size_t parts = 0;
  SplitPieces(s, sep, maxsplit, line, [&](size_t, size_t) { ++parts; });
  in.CheckListSize(parts, line);
  in.CheckSize(s.size(), line);
  List out;
  out.reserve(parts);
  SplitPieces(s, sep, maxsplit, line, [&](size_t begin, size_t end) { out.emplace_back(s.substr(begin, end - begin)); });
  return Value::MakeList(std::move(out));
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
    in.CheckListSize((name == "items" ? 3 : 1) * d.items.size(), line);
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
  if (name == "strip") return in.NewString(Strip(s, Arg(args, 0, "chars"), true, true), line);
  if (name == "lstrip") return in.NewString(Strip(s, Arg(args, 0, "chars"), true, false), line);
  if (name == "rstrip") return in.NewString(Strip(s, Arg(args, 0, "chars"), false, true), line);
  if (name == "upper") return in.NewString(Upper(s), line);
  if (name == "lower") return in.NewString(Lower(s), line);
  if (name == "title") return in.NewString(Title(s), line);
  if (name == "capitalize") return in.NewString(Capitalize(s), line);
  if (name == "split" || name == "rsplit") {
    const Value max = Arg(args, 1, "maxsplit");
    if (name == "rsplit" && max.is_int() && max.as_int() >= 0) Interpreter::Fail(line, "rsplit with maxsplit is not supported");
    return Split(in, s, Arg(args, 0, "sep"), max.is_int() ? max.as_int() : -1, line);
  }
  if (name == "replace") return ReplaceCall(in, s, args);
  if (name == "find") {
    const size_t hit = s.find(ExpectString(Arg(args, 0, "sub"), "find", line));
    return Value(hit == std::string::npos ? int64_t{-1} : int64_t(CountCodePoints(std::string_view(s).substr(0, hit))));
  }
  if (name == "count") {
    const std::string sub = ExpectString(Arg(args, 0, "sub"), "count", line);
    if (sub.empty()) return Value(int64_t(CountCodePoints(s) + 1));
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    const Value items = Arg(args, 0, "iterable");
    if (!items.is_list()) Interpreter::Fail(line, "join needs a list");
    std::string out;
    for (size_t i = 0; i < items.list().size(); ++i) {
      in.Step(line);
      const std::string& item = ExpectString(items.list()[i], "join", line);
      in.CheckGrowing(out.size() + s.size() + item.size(), line);
      if (i) out += s;
      out += item;
    }
    return in.NewString(std::move(out), line);
  }
  Interpreter::Fail(line, "a string has no method '" + name + "'");
}

}  // namespace mlaserve::jinja
