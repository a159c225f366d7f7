// Value: Python's truthiness, str(), repr() and == for the Jinja value types, and the
// conversion from the request's JSON.
#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>

namespace mlaserve::jinja {

Value Value::MakeList(List items) {
  auto data = std::make_shared<ListData>();
  for (const Value& item : items) data->depth = std::max(data->depth, 1 + item.Depth());
  data->items = std::move(items);
  return Value(Storage(std::move(data)));
}

int Value::Depth() const {
  if (is_list()) return std::get<std::shared_ptr<ListData>>(v_)->depth;
  if (is_dict()) return dict().depth;
  return 0;
}
Value Value::MakeDict() { return Value(Storage(std::make_shared<Dict>())); }
Value Value::MakeNamespace() {
  auto d = std::make_shared<Dict>();
  d->is_namespace = true;
  return Value(Storage(std::move(d)));
}
Value Value::MakeCallable(std::shared_ptr<const Callable> callable) {
  return Value(Storage(std::move(callable)));
}

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return std::get<double>(v_) != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !list().empty();
    case Kind::kDict: return !dict().items.empty();
    case Kind::kCallable: return true;
  }
  return false;
}

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  // %g switches to an exponent below 1e-4 and from 10^precision up; Python's repr only
  // below 1e-4 and from 1e16 up.
  const size_t e = s.find('e');
  if (e != std::string::npos) {
    const int exponent = std::atoi(s.c_str() + e + 1);
    if (exponent >= -4 && exponent < 16) {
      // Python writes these without an exponent: place the point in the digits %g found.
      std::string mantissa = s.substr(0, e);
      const bool negative = !mantissa.empty() && mantissa[0] == '-';
      if (negative) mantissa.erase(0, 1);
      std::string digits;
      for (char c : mantissa) {
        if (c != '.') digits += c;
      }
      const int point = exponent + 1;  // digits before the decimal point
      std::string out;
      if (point <= 0) {
        out = "0." + std::string(size_t(-point), '0') + digits;
      } else if (size_t(point) >= digits.size()) {
        out = digits + std::string(size_t(point) - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, size_t(point)) + "." + digits.substr(size_t(point));
      }
      return (negative ? "-" : "") + out;
    }
    return s;  // at least two exponent digits, as Python writes them
  }
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

namespace {

std::string QuoteString(const std::string& s) {
  // Python prefers single quotes unless the string contains one and no double quote.
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == q) out += '\\';
        out += c;
    }
  }
  out += q;
  return out;
}

}  // namespace

bool Value::AppendStr(std::string* out, size_t max_bytes) const {
  switch (kind()) {
    case Kind::kUndefined: break;
    case Kind::kNone: *out += "None"; break;
    case Kind::kBool: *out += as_bool() ? "True" : "False"; break;
    case Kind::kInt: *out += std::to_string(as_int()); break;
    case Kind::kFloat: *out += FormatFloat(std::get<double>(v_)); break;
    case Kind::kString:
      if (out->size() + as_string().size() > max_bytes) return false;
      *out += as_string();
      break;
    case Kind::kList:
      *out += '[';
      for (size_t i = 0; i < list().size(); ++i) {
        if (i) *out += ", ";
        if (!list()[i].AppendRepr(out, max_bytes)) return false;
      }
      *out += ']';
      break;
    case Kind::kDict: {
      *out += '{';
      bool first = true;
      for (const auto& [k, v] : dict().items) {
        if (!first) *out += ", ";
        first = false;
        if (out->size() + k.size() > max_bytes) return false;
        *out += QuoteString(k) + ": ";
        if (!v.AppendRepr(out, max_bytes)) return false;
      }
      *out += '}';
      break;
    }
    case Kind::kCallable: *out += "<function " + callable().name + ">"; break;
  }
  return out->size() <= max_bytes;
}

bool Value::AppendRepr(std::string* out, size_t max_bytes) const {
  if (!is_string()) return AppendStr(out, max_bytes);
  if (out->size() + as_string().size() > max_bytes) return false;
  *out += QuoteString(as_string());
  return out->size() <= max_bytes;
}

std::string Value::Str() const {
  if (is_string()) return as_string();
  std::string out;
  AppendStr(&out, SIZE_MAX);
  return out;
}

std::string Value::Repr() const {
  std::string out;
  AppendRepr(&out, SIZE_MAX);
  return out;
}

bool Value::Equals(const Value& other) const {
  int64_t unlimited = INT64_MAX;
  return *Equals(other, &unlimited);
}

std::optional<bool> Value::Equals(const Value& other, int64_t* nodes_left) const {
  if (--*nodes_left < 0) return std::nullopt;
  const bool numeric = is_number() || is_bool();
  const bool other_numeric = other.is_number() || other.is_bool();
  if (numeric && other_numeric) {
    if ((is_int() || is_bool()) && (other.is_int() || other.is_bool())) {
      return (is_int() ? as_int() : as_bool()) == (other.is_int() ? other.as_int() : other.as_bool());
    }
    return as_number() == other.as_number();
  }
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return as_string() == other.as_string();
    case Kind::kList: {
      if (&list() == &other.list()) return true;
      if (list().size() != other.list().size()) return false;
      for (size_t i = 0; i < list().size(); ++i) {
        const std::optional<bool> same = list()[i].Equals(other.list()[i], nodes_left);
        if (!same || !*same) return same;
      }
      return true;
    }
    case Kind::kDict: {
      if (&dict() == &other.dict()) return true;
      if (dict().items.size() != other.dict().items.size()) return false;
      for (const auto& [k, v] : dict().items) {
        const Value* o = other.dict().Find(k);
        if (!o) return false;
        const std::optional<bool> same = v.Equals(*o, nodes_left);
        if (!same || !*same) return same;
      }
      return true;
    }
    case Kind::kCallable: return &callable() == &other.callable();
    default: return false;
  }
}

std::string_view Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kCallable: return "function";
  }
  return "?";
}

namespace {

template <typename Json>
Value ConvertJson(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::None();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      return u > uint64_t(INT64_MAX) ? Value(double(u)) : Value(int64_t(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(ConvertJson(e));
      return Value::MakeList(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value d = Value::MakeDict();
      Dict& dict = d.dict();
      for (auto it = j.begin(); it != j.end(); ++it) {
        dict.items.emplace_back(it.key(), ConvertJson(it.value()));
        dict.depth = std::max(dict.depth, 1 + dict.items.back().second.Depth());
      }
      return d;
    }
    default: return Value::None();  // binary, discarded: never produced by parsing text
  }
}

}  // namespace

Value Value::FromJson(const nlohmann::json& j) { return ConvertJson(j); }
Value Value::FromJson(const nlohmann::ordered_json& j) { return ConvertJson(j); }

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::Set(const std::string& key, Value value) {
  depth = std::max(depth, 1 + value.Depth());
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

uint64_t RangeLength(int64_t start, int64_t stop, int64_t step) {
  if (step > 0 ? start >= stop : start <= stop) return 0;
  const uint64_t span = step > 0 ? uint64_t(stop) - uint64_t(start) : uint64_t(start) - uint64_t(stop);
  const uint64_t stride = step > 0 ? uint64_t(step) : uint64_t(-(step + 1)) + 1;
  return (span - 1) / stride + 1;
}

size_t CodePointLength(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  return std::min(n, s.size() - i);
}

size_t CountCodePoints(std::string_view s) {
  size_t count = 0;
  for (size_t i = 0; i < s.size(); i += CodePointLength(s, i)) ++count;
  return count;
}

std::pair<size_t, size_t> CodePointBytes(std::string_view s, size_t index) {
  size_t i = 0;
  for (size_t k = 0; k < index && i < s.size(); ++k) i += CodePointLength(s, i);
  return {i, i < s.size() ? i + CodePointLength(s, i) : i};
}

std::vector<std::string> CodePoints(std::string_view s) {
  std::vector<std::string> out;
  out.reserve(CountCodePoints(s));
  for (size_t i = 0; i < s.size();) {
    const size_t n = CodePointLength(s, i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace mlaserve::jinja
