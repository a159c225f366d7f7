// The tojson filter as Hugging Face defines it for chat templates: Python's
// json.dumps(value, ensure_ascii=False, indent=..., separators=...), keys in insertion order.
#include "tokenizer/jinja/interpreter.h"

#include <cstdio>

namespace mlaserve::jinja {
namespace {

void Quote(const std::string& s, std::string* out) {
  *out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          *out += buf;
        } else {
          *out += c;
        }
    }
  }
  *out += '"';
}

struct JsonWriter {
  Interpreter& in;
  int indent;
  const std::string& item_sep;
  const std::string& key_sep;
  int line;
  std::string out;

  void Newline(int depth) {
    out += '\n';
    out.append(size_t(indent) * size_t(depth), ' ');
  }

  void Write(const Value& v, int depth) {
    in.Step(line);
    in.CheckGrowing(out.size(), line);
    if (depth > 128) Interpreter::Fail(line, "tojson: value nested deeper than 128");
    switch (v.kind()) {
      case Value::Kind::kUndefined:
      case Value::Kind::kNone: out += "null"; return;
      case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
      case Value::Kind::kInt:
      case Value::Kind::kFloat: {
        const std::string s = v.Str();
        out += s == "inf" ? "Infinity" : s == "-inf" ? "-Infinity" : s == "nan" ? "NaN" : s;
        return;
      }
      case Value::Kind::kString:
        // Before quoting (which can grow it sixfold): the next check, or the final one, sees the rest.
        in.CheckGrowing(out.size() + v.as_string().size(), line);
        Quote(v.as_string(), &out);
        return;
      case Value::Kind::kList: {
        if (v.list().empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < v.list().size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) Newline(depth + 1);
          Write(v.list()[i], depth + 1);
        }
        if (indent >= 0) Newline(depth);
        out += ']';
        return;
      }
      case Value::Kind::kDict: {
        if (v.dict().items.empty()) {
          out += "{}";
          return;
        }
        out += '{';
        bool first = true;
        for (const auto& [k, item] : v.dict().items) {
          if (!first) out += item_sep;
          first = false;
          if (indent >= 0) Newline(depth + 1);
          Quote(k, &out);
          out += key_sep;
          Write(item, depth + 1);
        }
        if (indent >= 0) Newline(depth);
        out += '}';
        return;
      }
      case Value::Kind::kCallable: Interpreter::Fail(line, "tojson: a function is not JSON serializable");
    }
  }
};

}  // namespace

std::string ToJson(Interpreter& in, const Value& v, int indent, const std::string& item_separator,
                   const std::string& key_separator, int line) {
  JsonWriter writer{in, indent, item_separator, key_separator, line, {}};
  writer.Write(v, 0);
  in.CheckSize(writer.out.size(), line);
  return std::move(writer.out);
}

}  // namespace mlaserve::jinja
