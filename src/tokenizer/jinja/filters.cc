// Jinja's filters (`x | name(args)`) that chat templates use.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>

#include "tokenizer/jinja/builtin_args.h"

namespace mlaserve::jinja {
namespace {

// `attribute` may be dotted ("function.name"); integer parts index lists.
Value GetAttribute(const Value& item, const std::string& path) {
  Value current = item;
  size_t pos = 0;
  while (pos <= path.size()) {
    const size_t dot = std::min(path.find('.', pos), path.size());
    const std::string part = path.substr(pos, dot - pos);
    if (current.is_dict()) {
      const Value* v = current.dict().Find(part);
      current = v ? *v : Value();
    } else if (current.is_list() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      size_t i = 0;
      const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), i);
      current = error == std::errc() && i < current.list().size() ? current.list()[i] : Value();
    } else {
      return Value();
    }
    pos = dot + 1;
  }
  return current;
}

const List& ExpectList(Interpreter& in, const Value& v, const std::string& filter, int line, List* storage) {
  if (v.is_list()) return v.list();
  if (v.is_undefined()) return *storage;
  if (v.is_dict()) {
    in.CheckListSize(v.dict().items.size(), line);
    for (const auto& kv : v.dict().items) storage->emplace_back(kv.first);
    return *storage;
  }
  if (v.is_string()) {
    in.CheckListSize(CountCodePoints(v.as_string()), line);
    for (std::string& c : CodePoints(v.as_string())) storage->emplace_back(std::move(c));
    return *storage;
  }
  Interpreter::Fail(line, "'" + filter + "' needs a list, got " + std::string(v.TypeName()));
}

// select / reject / selectattr / rejectattr: keep items whose (attribute) value passes the test.
Value SelectItems(Interpreter& in, const Value& input, CallArgs& args, bool by_attribute, bool keep_passing,
                  const std::string& filter) {
  List storage;
  const List& items = ExpectList(in, input, filter, args.line, &storage);
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    attribute = ExpectString(Arg(args, next++, "attribute"), filter, args.line);
  }
  std::string test;
  if (next < args.positional.size()) test = ExpectString(args.positional[next++], filter, args.line);
  CallArgs test_args;
  test_args.line = args.line;
  test_args.positional.assign(args.positional.begin() + std::ptrdiff_t(std::min(next, args.positional.size())),
                              args.positional.end());
  List out;
  for (const Value& item : items) {
    in.Step(args.line);
    const Value subject = by_attribute ? GetAttribute(item, attribute) : item;
    const bool passes = test.empty() ? subject.Truthy() : ApplyTest(in, test, subject, test_args);
    if (passes == keep_passing) out.push_back(item);
  }
  return in.NewList(std::move(out), args.line);
}

Value Map(Interpreter& in, const Value& input, CallArgs& args) {
  List storage;
  const List& items = ExpectList(in, input, "map", args.line, &storage);
  const Value attribute = Arg(args, 99, "attribute");
  List out;
  if (attribute.is_string() || attribute.is_int()) {
    const Value fallback = Arg(args, 99, "default");
    const std::string path = attribute.Str();
    for (const Value& item : items) {
      in.Step(args.line);
      Value v = GetAttribute(item, path);
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return in.NewList(std::move(out), args.line);
  }
  const std::string filter = ExpectString(Arg(args, 0, "filter"), "map", args.line);
  CallArgs filter_args;
  filter_args.line = args.line;
  filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
  filter_args.keyword = args.keyword;
  for (const Value& item : items) {
    in.Step(args.line);
    out.push_back(ApplyFilter(in, filter, item, filter_args));
  }
  return in.NewList(std::move(out), args.line);
}

// Jinja's indent(width=4, first=False, blank=False): `width` is a string to prepend or a count
// of spaces (Python's " " * width: none when negative). The result's size is known before it is
// built, and checked then.
std::string Indent(Interpreter& in, const std::string& s, const Value& width_v, bool first, bool blank, int line) {
  if (!width_v.is_undefined() && !width_v.is_string() && !width_v.is_int() && !width_v.is_bool()) {
    Interpreter::Fail(line, "indent width must be a string or an integer, got " + std::string(width_v.TypeName()));
  }
  const int64_t width = width_v.is_int() ? width_v.as_int() : width_v.is_bool() ? int64_t(width_v.as_bool()) : 4;
  const size_t pad_bytes = width_v.is_string() ? width_v.as_string().size() : size_t(std::max<int64_t>(width, 0));
  const size_t lines = size_t(std::count(s.begin(), s.end(), '\n')) + 1;
  size_t total = 0;
  if (__builtin_mul_overflow(pad_bytes, lines, &total) || __builtin_add_overflow(total, s.size(), &total)) {
    total = SIZE_MAX;
  }
  in.CheckSize(std::max(total, pad_bytes), line);  // at most: a pad on every line
  const std::string pad = width_v.is_string() ? width_v.as_string() : std::string(pad_bytes, ' ');
  std::string out;
  size_t pos = 0;
  bool line_start = true;
  bool first_line = true;
  while (pos <= s.size()) {
    const size_t nl = std::min(s.find('\n', pos), s.size());
    const std::string_view text_line = std::string_view(s).substr(pos, nl - pos);
    if (line_start && (first || !first_line) && (blank || !text_line.empty())) out += pad;
    out += text_line;
    if (nl < s.size()) out += '\n';
    first_line = false;
    pos = nl + 1;
  }
  return out;
}

int CompareForSort(const Value& a, const Value& b, bool case_sensitive, int line) {
  if (a.is_number() && b.is_number()) return a.as_number() < b.as_number() ? -1 : a.as_number() > b.as_number();
  if (a.is_string() && b.is_string()) {
    return case_sensitive ? a.as_string().compare(b.as_string()) : Lower(a.as_string()).compare(Lower(b.as_string()));
  }
  Interpreter::Fail(line, "sort: cannot compare " + std::string(a.TypeName()) + " with " + std::string(b.TypeName()));
}

}  // namespace

Value ApplyFilter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  const int line = args.line;
  if (name == "default" || name == "d") {
    const bool boolean = Arg(args, 1, "boolean").Truthy();
    const bool use_default = boolean ? !v.Truthy() : v.is_undefined();
    if (!use_default) return v;
    const Value fallback = Arg(args, 0, "default_value");
    return fallback.is_undefined() ? Value("") : fallback;
  }
  if (name == "safe") return v;
  if (name == "string") return v.is_string() ? v : Value(in.Str(v, line));
  if (name == "tojson") {
    const Value indent = Arg(args, 0, "indent");
    const Value separators = Arg(args, 99, "separators");
    std::string item_sep = indent.is_int() ? "," : ", ", key_sep = ": ";
    if (separators.is_list() && separators.list().size() == 2) {
      item_sep = ExpectString(separators.list()[0], "tojson separators", line);
      key_sep = ExpectString(separators.list()[1], "tojson separators", line);
    }
    return Value(ToJson(in, v, indent.is_int() ? int(std::clamp<int64_t>(indent.as_int(), 0, 64)) : -1, item_sep, key_sep, line));
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) {
      in.Step(line, int64_t(v.as_string().size() / 256));
      return Value(int64_t(CountCodePoints(v.as_string())));
    }
    if (v.is_list()) return Value(int64_t(v.list().size()));
    if (v.is_dict()) return Value(int64_t(v.dict().items.size()));
    if (v.is_undefined()) return Value(int64_t{0});
    Interpreter::Fail(line, "'length' of a " + std::string(v.TypeName()) + " value");
  }
  if ((name == "first" || name == "last") && v.is_string()) {
    const std::string& str = v.as_string();
    if (str.empty()) return Value();
    in.Step(line, int64_t(str.size() / 256));
    const auto [begin, end] = CodePointBytes(str, name == "first" ? 0 : CountCodePoints(str) - 1);
    return Value(str.substr(begin, end - begin));
  }
  if (name == "first" || name == "last") {
    List storage;
    const List& items = ExpectList(in, v, name, line, &storage);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    List storage;
    const List& items = ExpectList(in, v, name, line, &storage);
    return in.NewList(items, line);
  }
  if (name == "reverse") {
    if (v.is_string()) {
      const std::string& str = v.as_string();
      in.CheckSize(str.size(), line);
      std::string out;
      out.reserve(str.size());
      for (size_t end = str.size(); end > 0;) {
        size_t begin = end - 1;  // back to the code point's lead byte
        while (begin > 0 && (static_cast<unsigned char>(str[begin]) & 0xC0) == 0x80 && end - begin < 4) --begin;
        out.append(str, begin, end - begin);
        end = begin;
      }
      return Value(std::move(out));
    }
    List storage;
    List items = ExpectList(in, v, name, line, &storage);
    std::reverse(items.begin(), items.end());
    return in.NewList(std::move(items), line);
  }
  if (name == "join") {
    List storage;
    const List& items = ExpectList(in, v, name, line, &storage);
    const Value sep_v = Arg(args, 0, "d");
    const std::string sep = sep_v.is_undefined() ? "" : in.Str(sep_v, line);
    const Value attribute = Arg(args, 1, "attribute");
    const std::string path = attribute.is_undefined() ? "" : in.Str(attribute, line);
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      in.Step(line);
      if (i) out += sep;
      const Value item = attribute.is_undefined() ? items[i] : GetAttribute(items[i], path);
      if (item.is_string()) {
        in.CheckGrowing(out.size() + item.as_string().size(), line);
        out += item.as_string();
      } else if (!item.AppendStr(&out, in.limits().max_output_bytes)) {
        in.CheckGrowing(SIZE_MAX, line);
      }
      in.CheckGrowing(out.size(), line);
    }
    return in.NewString(std::move(out), line);
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::MakeList();
    if (!v.is_dict()) Interpreter::Fail(line, "'items' needs a dict, got " + std::string(v.TypeName()));
    in.CheckListSize(3 * v.dict().items.size(), line);  // the list and a pair per item
    List out;
    for (const auto& [k, item] : v.dict().items) out.push_back(Value::MakeList({Value(k), item}));
    return Value::MakeList(std::move(out));
  }
  if (name == "selectattr") return SelectItems(in, v, args, true, true, name);
  if (name == "rejectattr") return SelectItems(in, v, args, true, false, name);
  if (name == "select") return SelectItems(in, v, args, false, true, name);
  if (name == "reject") return SelectItems(in, v, args, false, false, name);
  if (name == "map") return Map(in, v, args);
  if (name == "unique") {
    List storage;
    List out;
    for (const Value& item : ExpectList(in, v, name, line, &storage)) {
      in.Step(line);
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return in.Equal(o, item, line); })) out.push_back(item);
    }
    return in.NewList(std::move(out), line);
  }
  if (name == "sort") {
    List storage;
    List items = ExpectList(in, v, name, line, &storage);
    in.CheckListSize(items.size(), line);
    const bool reverse = Arg(args, 0, "reverse").Truthy();
    const bool case_sensitive = Arg(args, 1, "case_sensitive").Truthy();
    const Value attribute = Arg(args, 2, "attribute");
    const std::string path = attribute.is_undefined() ? "" : in.Str(attribute, line);
    in.Step(line, int64_t(items.size()) * 20);
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      const Value x = attribute.is_undefined() ? a : GetAttribute(a, path);
      const Value y = attribute.is_undefined() ? b : GetAttribute(b, path);
      const int cmp = CompareForSort(x, y, case_sensitive, line);
      return reverse ? cmp > 0 : cmp < 0;
    });
    return Value::MakeList(std::move(items));
  }
  if (name == "int") {
    if (v.is_int()) return v;
    if (v.is_float() && !std::isnan(v.as_number())) {
      // Python's int() truncates toward zero; past 64 bits it would need a big integer.
      const double d = std::trunc(v.as_number());
      if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) {
        Interpreter::Fail(line, "'int' of " + FormatFloat(v.as_number()) + ": out of the 64-bit integer range");
      }
      return Value(int64_t(d));
    }
    if (v.is_bool()) return Value(int64_t(v.as_bool()));
    if (v.is_string()) {
      try {
        size_t used = 0;
        const std::string s = Strip(v.as_string(), Value(), true, true);
        const long long n = std::stoll(s, &used);
        if (used == s.size()) return Value(int64_t(n));
      } catch (...) {
      }
    }
    const Value fallback = Arg(args, 0, "default");
    return fallback.is_undefined() ? Value(int64_t{0}) : fallback;
  }
  if (name == "float") {
    if (v.is_number() || v.is_bool()) return Value(v.as_number());
    if (v.is_string()) {
      try {
        size_t used = 0;
        const std::string s = Strip(v.as_string(), Value(), true, true);
        const double d = std::stod(s, &used);
        if (used == s.size()) return Value(d);
      } catch (...) {
      }
    }
    const Value fallback = Arg(args, 0, "default");
    return fallback.is_undefined() ? Value(0.0) : fallback;
  }
  if (name == "abs") {
    if (v.is_int() && v.as_int() == INT64_MIN) Interpreter::Fail(line, "integer overflow: abs(" + std::to_string(INT64_MIN) + ")");
    if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_float()) return Value(std::fabs(v.as_number()));
    Interpreter::Fail(line, "'abs' needs a number");
  }
  if (name == "max" || name == "min" || name == "sum") {
    List storage;
    const List& items = ExpectList(in, v, name, line, &storage);
    if (name == "sum") {
      Value total(int64_t{0});
      for (const Value& item : items) {
        if (!item.is_number()) Interpreter::Fail(line, "'sum' needs numbers");
        int64_t sum = 0;
        if (total.is_int() && item.is_int() && __builtin_add_overflow(total.as_int(), item.as_int(), &sum)) {
          Interpreter::Fail(line, "integer overflow in 'sum'");
        }
        total = total.is_int() && item.is_int() ? Value(sum) : Value(total.as_number() + item.as_number());
      }
      return total;
    }
    if (items.empty()) return Value();
    Value best = items[0];
    for (const Value& item : items) {
      const int cmp = CompareForSort(item, best, false, line);
      if (name == "max" ? cmp > 0 : cmp < 0) best = item;
    }
    return best;
  }
  // String filters.
  const std::string str = v.is_string() ? std::string() : in.Str(v, line);
  const std::string& s = v.is_string() ? v.as_string() : str;
  if (name == "trim") return in.NewString(Strip(s, Arg(args, 0, "chars"), true, true), line);
  if (name == "upper") return in.NewString(Upper(s), line);
  if (name == "lower") return in.NewString(Lower(s), line);
  if (name == "title") return in.NewString(Title(s), line);
  if (name == "capitalize") return in.NewString(Capitalize(s), line);
  if (name == "replace") return ReplaceCall(in, s, args);
  if (name == "indent") {
    return Value(Indent(in, s, Arg(args, 0, "width"), Arg(args, 1, "first").Truthy(), Arg(args, 2, "blank").Truthy(), line));
  }
  Interpreter::Fail(line, "unknown filter '" + name + "'");
}

}  // namespace mlaserve::jinja
