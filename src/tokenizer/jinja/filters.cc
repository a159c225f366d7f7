// Jinja's filters (`x | name(args)`) that chat templates use.
#include <algorithm>
#include <cmath>

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
      const size_t i = std::stoul(part);
      current = i < current.list().size() ? current.list()[i] : Value();
    } else {
      return Value();
    }
    pos = dot + 1;
  }
  return current;
}

const List& ExpectList(const Value& v, const std::string& filter, int line, List* storage) {
  if (v.is_list()) return v.list();
  if (v.is_undefined()) return *storage;
  if (v.is_dict()) {
    for (const auto& kv : v.dict().items) storage->emplace_back(kv.first);
    return *storage;
  }
  if (v.is_string()) {
    for (std::string& c : CodePoints(v.as_string())) storage->emplace_back(std::move(c));
    return *storage;
  }
  Interpreter::Fail(line, "'" + filter + "' needs a list, got " + std::string(v.TypeName()));
}

// select / reject / selectattr / rejectattr: keep items whose (attribute) value passes the test.
Value SelectItems(Interpreter& in, const Value& input, CallArgs& args, bool by_attribute, bool keep_passing,
                  const std::string& filter) {
  List storage;
  const List& items = ExpectList(input, filter, args.line, &storage);
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
  return Value::MakeList(std::move(out));
}

Value Map(Interpreter& in, const Value& input, CallArgs& args) {
  List storage;
  const List& items = ExpectList(input, "map", args.line, &storage);
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
    return Value::MakeList(std::move(out));
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
  return Value::MakeList(std::move(out));
}

std::string Indent(const std::string& s, const Value& width_v, bool first, bool blank) {
  const std::string pad = width_v.is_string() ? width_v.as_string() : std::string(size_t(width_v.is_int() ? width_v.as_int() : 4), ' ');
  std::string out;
  size_t pos = 0;
  bool line_start = true;
  bool first_line = true;
  while (pos <= s.size()) {
    const size_t nl = std::min(s.find('\n', pos), s.size());
    const std::string line = s.substr(pos, nl - pos);
    if (line_start && (first || !first_line) && (blank || !line.empty())) out += pad;
    out += line;
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
  if (name == "string") return v.is_string() ? v : Value(v.Str());
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
    if (v.is_string()) return Value(int64_t(CodePoints(v.as_string()).size()));
    if (v.is_list()) return Value(int64_t(v.list().size()));
    if (v.is_dict()) return Value(int64_t(v.dict().items.size()));
    if (v.is_undefined()) return Value(int64_t{0});
    Interpreter::Fail(line, "'length' of a " + std::string(v.TypeName()) + " value");
  }
  if (name == "first" || name == "last") {
    List storage;
    const List& items = ExpectList(v, name, line, &storage);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    List storage;
    const List& items = ExpectList(v, name, line, &storage);
    return Value::MakeList(items);
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> chars = CodePoints(v.as_string());
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value(std::move(out));
    }
    List storage;
    List items = ExpectList(v, name, line, &storage);
    std::reverse(items.begin(), items.end());
    return Value::MakeList(std::move(items));
  }
  if (name == "join") {
    List storage;
    const List& items = ExpectList(v, name, line, &storage);
    const Value sep = Arg(args, 0, "d");
    const Value attribute = Arg(args, 1, "attribute");
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      in.Step(line);
      if (i) out += sep.is_undefined() ? "" : sep.Str();
      out += attribute.is_undefined() ? items[i].Str() : GetAttribute(items[i], attribute.Str()).Str();
      in.CheckSize(out.size(), line);
    }
    return Value(std::move(out));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::MakeList();
    if (!v.is_dict()) Interpreter::Fail(line, "'items' needs a dict, got " + std::string(v.TypeName()));
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
    for (const Value& item : ExpectList(v, name, line, &storage)) {
      in.Step(line, int64_t(out.size()) + 1);
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return o.Equals(item); })) out.push_back(item);
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "sort") {
    List storage;
    List items = ExpectList(v, name, line, &storage);
    const bool reverse = Arg(args, 0, "reverse").Truthy();
    const bool case_sensitive = Arg(args, 1, "case_sensitive").Truthy();
    const Value attribute = Arg(args, 2, "attribute");
    in.Step(line, int64_t(items.size()) * 20);
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      const Value x = attribute.is_undefined() ? a : GetAttribute(a, attribute.Str());
      const Value y = attribute.is_undefined() ? b : GetAttribute(b, attribute.Str());
      const int cmp = CompareForSort(x, y, case_sensitive, line);
      return reverse ? cmp > 0 : cmp < 0;
    });
    return Value::MakeList(std::move(items));
  }
  if (name == "int") {
    if (v.is_int()) return v;
    if (v.is_float()) return Value(int64_t(v.as_number()));
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
    if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_float()) return Value(std::fabs(v.as_number()));
    Interpreter::Fail(line, "'abs' needs a number");
  }
  if (name == "max" || name == "min" || name == "sum") {
    List storage;
    const List& items = ExpectList(v, name, line, &storage);
    if (name == "sum") {
      Value total(int64_t{0});
      for (const Value& item : items) {
        if (!item.is_number()) Interpreter::Fail(line, "'sum' needs numbers");
        total = total.is_int() && item.is_int() ? Value(total.as_int() + item.as_int()) : Value(total.as_number() + item.as_number());
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
  const std::string s = v.is_string() ? v.as_string() : v.Str();
  if (name == "trim") return Value(Strip(s, Arg(args, 0, "chars"), true, true));
  if (name == "upper") return Value(Upper(s));
  if (name == "lower") return Value(Lower(s));
  if (name == "title") return Value(Title(s));
  if (name == "capitalize") return Value(Capitalize(s));
  if (name == "replace") return ReplaceCall(in, s, args);
  if (name == "indent") {
    std::string out = Indent(s, Arg(args, 0, "width"), Arg(args, 1, "first").Truthy(), Arg(args, 2, "blank").Truthy());
    in.CheckSize(out.size(), line);
    return Value(std::move(out));
  }
  Interpreter::Fail(line, "unknown filter '" + name + "'");
}

}  // namespace mlaserve::jinja
