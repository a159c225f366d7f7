// Jinja's tests (`x is defined`, `x is not none`, `n is divisibleby(3)`, ...).
#include "tokenizer/jinja/builtin_args.h"

namespace mlaserve::jinja {

bool ApplyTest(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  (void)in;
  const int line = args.line;
  const Value arg = Arg(args, 0, "value");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_callable();
  if (name == "odd" || name == "even") {
    if (!v.is_int()) Interpreter::Fail(line, "'" + name + "' needs an integer");
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    if (!v.is_int() || !arg.is_int() || arg.as_int() == 0) Interpreter::Fail(line, "'divisibleby' needs non-zero integers");
    return arg.as_int() == -1 || v.as_int() % arg.as_int() == 0;  // INT64_MIN % -1 traps in hardware
  }
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return v.Equals(arg);
  if (name == "ne" || name == "!=") return !v.Equals(arg);
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    for (char c : v.as_string()) {
      if (name == "lower" ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z')) return false;
    }
    return true;
  }
  if (name == "in") {
    if (arg.is_list()) {
      for (const Value& item : arg.list()) {
        if (item.Equals(v)) return true;
      }
      return false;
    }
    if (arg.is_string() && v.is_string()) return arg.as_string().find(v.as_string()) != std::string::npos;
    if (arg.is_dict() && v.is_string()) return arg.dict().Find(v.as_string()) != nullptr;
    return false;
  }
  if (name == "lt" || name == "gt" || name == "le" || name == "ge" || name == "<" || name == ">" ||
      name == "<=" || name == ">=") {
    int cmp;
    if (v.is_number() && arg.is_number()) {
      cmp = v.as_number() < arg.as_number() ? -1 : v.as_number() > arg.as_number() ? 1 : 0;
    } else if (v.is_string() && arg.is_string()) {
      cmp = v.as_string().compare(arg.as_string());
    } else {
      Interpreter::Fail(line, "'" + name + "' compares two numbers or two strings");
    }
    if (name == "lt" || name == "<") return cmp < 0;
    if (name == "gt" || name == ">") return cmp > 0;
    if (name == "le" || name == "<=") return cmp <= 0;
    return cmp >= 0;
  }
  Interpreter::Fail(line, "unknown test '" + name + "'");
}

}  // namespace mlaserve::jinja
