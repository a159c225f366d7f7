// The tree-walking interpreter: statements write to the output, expressions produce Values
// with Jinja2's (Python's) semantics. Builtin filters, tests and methods live in their own
// files; this file owns scoping, loops, macros, operators and the render limits.
#include "tokenizer/jinja/interpreter.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <unordered_set>

namespace mlaserve::jinja {

const Value* Scope::Find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    if (const Value* v = s->vars.Find(name)) return v;
  }
  return nullptr;
}

Result<std::string> Interpreter::Render(const Body& body, Dict globals) {
  auto root = std::make_shared<Scope>();
  root->vars = std::move(globals);
  std::string output;
  out_ = &output;
  steps_ = 0;
  allocated_bytes_ = 0;
  call_depth_ = 0;
  eval_depth_ = 0;
  // The render's allocations end with it: give them back to the template's shared budget.
  const auto release = [&] {
    if (concurrent_bytes_) concurrent_bytes_->fetch_sub(allocated_bytes_);
    allocated_bytes_ = 0;
  };
  try {
    ExecBody(body, root);
  } catch (const RenderError& e) {
    out_ = nullptr;
    root->vars.items.clear();  // macros hold their defining scope: break the cycle
    release();
    return Status::Error("line " + std::to_string(e.line) + ": " + e.message);
  }
  out_ = nullptr;
  root->vars.items.clear();
  release();
  return output;
}

void Interpreter::Step(int line, int64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    Fail(line, "the template ran more than " + std::to_string(limits_.max_steps) + " steps");
  }
}

void Interpreter::CheckSize(size_t size, int line) {
  if (size > limits_.max_output_bytes) {
    Fail(line, "the template built a value larger than " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  allocated_bytes_ += size;
  const size_t concurrent = concurrent_bytes_ ? concurrent_bytes_->fetch_add(size) + size : 0;
  if (allocated_bytes_ > limits_.max_render_bytes) {
    Fail(line, "the template allocated more than " + std::to_string(limits_.max_render_bytes) + " bytes");
  }
  if (concurrent > limits_.max_concurrent_render_bytes) {
    Fail(line, "the renders of this template running at once allocated more than " +
                   std::to_string(limits_.max_concurrent_render_bytes) + " bytes");
  }
  Step(line, int64_t(size / 256));
}

void Interpreter::CheckListSize(size_t count, int line) {
  if (count > limits_.max_output_bytes / sizeof(Value)) {
    Fail(line, "the template built a list of more than " + std::to_string(limits_.max_output_bytes / sizeof(Value)) +
                   " items");
  }
  CheckSize(count * sizeof(Value), line);
}

Value Interpreter::NewString(std::string s, int line) {
  CheckSize(s.size(), line);
  return Value(std::move(s));
}

Value Interpreter::NewList(List items, int line) {
  CheckListSize(items.size(), line);
  return Value::MakeList(std::move(items));
}

std::string Interpreter::Str(const Value& v, int line) {
  if (v.is_string()) return v.as_string();  // already built and charged
  std::string out;
  if (!v.AppendStr(&out, limits_.max_output_bytes)) CheckSize(limits_.max_output_bytes + 1, line);
  CheckSize(out.size(), line);
  return out;
}

bool Interpreter::Equal(const Value& a, const Value& b, int line) {
  int64_t nodes_left = std::max<int64_t>(limits_.max_steps - steps_, 0) + 1;
  const int64_t budget = nodes_left;
  const std::optional<bool> same = a.Equals(b, &nodes_left);
  Step(line, budget - std::max<int64_t>(nodes_left, 0));
  if (!same) Step(line, limits_.max_steps + 1);  // out of steps: Step fails
  return *same;
}

// One more level of the interpreter's recursion (an expression inside an expression, a block
// inside a block, a macro call) for the scope of this object.
struct EvalDepth {
  EvalDepth(Interpreter& interpreter, int line) : in(interpreter) {
    if (in.eval_depth_ >= in.limits_.max_eval_depth) {
      Interpreter::Fail(line, "the template nested expressions, blocks and macro calls deeper than " +
                                  std::to_string(in.limits_.max_eval_depth));
    }
    ++in.eval_depth_;
  }
  ~EvalDepth() { --in.eval_depth_; }
  EvalDepth(const EvalDepth&) = delete;
  EvalDepth& operator=(const EvalDepth&) = delete;
  Interpreter& in;
};

void Interpreter::Emit(const std::string& text, int line) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    Fail(line, "the rendered prompt is larger than " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  out_->append(text);
  Step(line, int64_t(text.size() / 256));
}

Interpreter::Flow Interpreter::ExecBody(const Body& body, const std::shared_ptr<Scope>& scope) {
  EvalDepth depth(*this, body.empty() ? 0 : body.front()->line);
  for (const auto& s : body) {
    const Flow flow = Exec(*s, scope);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::Exec(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  Step(s.line);
  switch (s.kind) {
    case Stmt::Kind::kText: Emit(s.text, s.line); return Flow::kNormal;
    case Stmt::Kind::kOutput: Emit(Str(Eval(*s.expr, scope), s.line), s.line); return Flow::kNormal;
    case Stmt::Kind::kIf:
      for (size_t i = 0; i < s.conditions.size(); ++i) {
        if (Eval(*s.conditions[i], scope).Truthy()) return ExecBody(s.bodies[i], scope);
      }
      return ExecBody(s.else_body, scope);
    case Stmt::Kind::kFor: ExecFor(s, scope); return Flow::kNormal;
    case Stmt::Kind::kSet: ExecSet(s, scope); return Flow::kNormal;
    case Stmt::Kind::kMacro: DefineMacro(s, scope); return Flow::kNormal;
    case Stmt::Kind::kBreak: return Flow::kBreak;
    case Stmt::Kind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

namespace {

// What `for` iterates: list items, dict keys, string characters; undefined is empty.
List Iterate(Interpreter& in, const Value& v, int line) {
  switch (v.kind()) {
    case Value::Kind::kList: return v.list();
    case Value::Kind::kDict: {
      in.CheckListSize(v.dict().items.size(), line);
      List keys;
      for (const auto& kv : v.dict().items) keys.emplace_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      in.CheckListSize(CountCodePoints(v.as_string()), line);
      List chars;
      for (std::string& c : CodePoints(v.as_string())) chars.emplace_back(std::move(c));
      return chars;
    }
    case Value::Kind::kUndefined: return {};
    default: Interpreter::Fail(line, "cannot iterate over a " + std::string(v.TypeName()) + " value");
  }
}

// Whether `v` is or contains `target` (a namespace about to receive v: a cycle would make
// printing and == recurse forever). Visits each list and dict once.
bool Holds(Interpreter& in, const Value& v, const Dict* target, std::unordered_set<const void*>* seen, int line) {
  if (v.is_dict()) {
    if (&v.dict() == target) return true;
    if (!seen->insert(&v.dict()).second) return false;
    in.Step(line, int64_t(v.dict().items.size()));
    for (const auto& kv : v.dict().items) {
      if (Holds(in, kv.second, target, seen, line)) return true;
    }
  } else if (v.is_list()) {
    if (!seen->insert(&v.list()).second) return false;
    in.Step(line, int64_t(v.list().size()));
    for (const Value& item : v.list()) {
      if (Holds(in, item, target, seen, line)) return true;
    }
  }
  return false;
}

void Bind(Scope& scope, const std::vector<std::string>& targets, const Value& item, int line) {
  if (targets.size() == 1) {
    scope.vars.Set(targets[0], item);
    return;
  }
  if (!item.is_list() || item.list().size() != targets.size()) {
    Interpreter::Fail(line, "cannot unpack a " + std::string(item.TypeName()) + " value into " +
                                std::to_string(targets.size()) + " names");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.vars.Set(targets[i], item.list()[i]);
}

}  // namespace

void Interpreter::ExecFor(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  List items = Iterate(*this, Eval(*s.expr, scope), s.line);
  auto loop_scope = std::make_shared<Scope>();
  loop_scope->parent = scope;
  if (s.filter) {
    List kept;
    for (Value& item : items) {
      Step(s.line);
      Bind(*loop_scope, s.targets, item, s.line);
      if (Eval(*s.filter, loop_scope).Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    ExecBody(s.else_body, scope);
    return;
  }
  const auto n = int64_t(items.size());
  for (int64_t i = 0; i < n; ++i) {
    Step(s.line);
    Value loop = Value::MakeDict();
    Dict& d = loop.dict();
    d.Set("index", Value(i + 1));
    d.Set("index0", Value(i));
    d.Set("revindex", Value(n - i));
    d.Set("revindex0", Value(n - i - 1));
    d.Set("first", Value(i == 0));
    d.Set("last", Value(i == n - 1));
    d.Set("length", Value(n));
    d.Set("previtem", i > 0 ? items[size_t(i - 1)] : Value());
    d.Set("nextitem", i + 1 < n ? items[size_t(i + 1)] : Value());
    loop_scope->vars.Set("loop", std::move(loop));
    Bind(*loop_scope, s.targets, items[size_t(i)], s.line);
    if (ExecBody(s.body, loop_scope) == Flow::kBreak) break;
  }
}

void Interpreter::ExecSet(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  if (s.set_attr) {
    const Value* ns = scope->Find(s.targets[0]);
    if (!ns || !ns->is_dict() || !ns->dict().is_namespace) {
      Fail(s.line, "cannot assign attribute '" + s.targets[1] + "' on '" + s.targets[0] + "': not a namespace()");
    }
    Value value = Eval(*s.expr, scope);
    CheckListSize(ns->dict().items.size() + 1, s.line);
    std::unordered_set<const void*> seen;
    if (Holds(*this, value, &ns->dict(), &seen, s.line)) {
      Fail(s.line, "'" + s.targets[0] + "." + s.targets[1] + "' would hold '" + s.targets[0] + "' itself");
    }
    ns->dict().Set(s.targets[1], std::move(value));
    return;
  }
  if (!s.expr) {
    std::string captured;
    std::string* saved = out_;
    out_ = &captured;
    ExecBody(s.body, scope);
    out_ = saved;
    scope->vars.Set(s.targets[0], NewString(std::move(captured), s.line));
    return;
  }
  Bind(*scope, s.targets, Eval(*s.expr, scope), s.line);
}

void Interpreter::DefineMacro(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  auto callable = std::make_shared<Callable>();
  callable->name = s.name;
  // The macro sees the scope it was defined in (weakly: that scope holds the macro).
  std::weak_ptr<Scope> defined_in = scope;
  const Stmt* macro = &s;
  callable->call = [macro, defined_in](Interpreter& in, CallArgs& args) -> Value {
    auto local = std::make_shared<Scope>();
    local->parent = defined_in.lock();
    if (args.positional.size() > macro->params.size()) {
      Fail(args.line, "macro '" + macro->name + "' takes " + std::to_string(macro->params.size()) +
                          " arguments, got " + std::to_string(args.positional.size()));
    }
    for (size_t i = 0; i < macro->params.size(); ++i) {
      const auto& [name, default_value] = macro->params[i];
      if (i < args.positional.size()) {
        local->vars.Set(name, args.positional[i]);
      } else if (default_value) {
        local->vars.Set(name, in.Eval(*default_value, local));
      } else {
        local->vars.Set(name, Value());
      }
    }
    for (auto& [key, value] : args.keyword) {
      bool known = false;
      for (const auto& p : macro->params) known = known || p.first == key;
      if (!known) Fail(args.line, "macro '" + macro->name + "' has no argument '" + key + "'");
      local->vars.Set(key, value);
    }
    if (++in.call_depth_ > in.limits_.max_call_depth) {
      Fail(args.line, "macro calls nested deeper than " + std::to_string(in.limits_.max_call_depth));
    }
    std::string captured;
    std::string* saved = in.out_;
    in.out_ = &captured;
    in.ExecBody(macro->body, local);
    in.out_ = saved;
    --in.call_depth_;
    return in.NewString(std::move(captured), args.line);
  };
  scope->vars.Set(s.name, Value::MakeCallable(std::move(callable)));
}

Value Interpreter::Call(const Value& callee, CallArgs& args, int line) {
  if (!callee.is_callable()) Fail(line, "a " + std::string(callee.TypeName()) + " value is not callable");
  args.line = line;
  // A macro that failed part-way leaves out_/call_depth_ for Render's catch to discard.
  return callee.callable().call(*this, args);
}

CallArgs Interpreter::EvalArgs(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope) {
  CallArgs args;
  args.line = e.line;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(Eval(*e.args[i], scope));
  for (const auto& [key, value] : e.kwargs) args.keyword.emplace_back(key, Eval(*value, scope));
  return args;
}

Value Interpreter::EvalCall(const Expr& e, const std::shared_ptr<Scope>& scope) {
  const Expr& callee = *e.args[0];
  if (callee.kind == Expr::Kind::kAttr) {
    const Value object = Eval(*callee.args[0], scope);
    if (object.is_dict()) {
      if (const Value* member = object.dict().Find(callee.name); member && member->is_callable()) {
        CallArgs args = EvalArgs(e, 1, scope);
        return Call(*member, args, e.line);
      }
    }
    if (HasMethod(object, callee.name)) {
      CallArgs args = EvalArgs(e, 1, scope);
      return CallMethod(*this, object, callee.name, args);
    }
    Fail(e.line, "a " + std::string(object.TypeName()) + " value has no method '" + callee.name + "'");
  }
  const Value f = Eval(callee, scope);
  if (f.is_undefined() && callee.kind == Expr::Kind::kName) Fail(e.line, "'" + callee.name + "' is undefined");
  CallArgs args = EvalArgs(e, 1, scope);
  return Call(f, args, e.line);
}

namespace {

// Python's index rules: negative counts from the end; out of range is undefined.
std::optional<size_t> PyIndex(int64_t i, size_t size) {
  if (i < 0) i += int64_t(size);
  if (i < 0 || i >= int64_t(size)) return std::nullopt;
  return size_t(i);
}

int64_t ClampSliceBound(const Value& v, int64_t size, int64_t step, bool is_start, int line) {
  if (v.is_undefined() || v.is_none()) {
    if (step > 0) return is_start ? 0 : size;
    return is_start ? size - 1 : -1;
  }
  if (!v.is_int()) Interpreter::Fail(line, "slice indices must be integers");
  int64_t i = v.as_int();
  if (i < 0) {
    i += size;
    if (i < 0) i = step > 0 ? 0 : -1;
  } else if (i >= size) {
    i = step > 0 ? size : size - 1;
  }
  return i;
}

// Python's slice of `size` items: calls take(i) for each index in order.
template <typename Take>
void PySlice(int64_t size, const Value& start, const Value& stop, const Value& step_v, int line, Take take) {
  int64_t step = 1;
  if (!step_v.is_undefined() && !step_v.is_none()) {
    if (!step_v.is_int()) Interpreter::Fail(line, "slice indices must be integers");
    step = step_v.as_int();
  }
  if (step == 0) Interpreter::Fail(line, "slice step cannot be zero");
  const int64_t begin = ClampSliceBound(start, size, step, true, line);
  const int64_t end = ClampSliceBound(stop, size, step, false, line);
  // begin and end lie in [-1, size], but i += step can overflow (step = INT64_MAX): count.
  const uint64_t count = RangeLength(begin, end, step);
  for (uint64_t k = 0; k < count; ++k) take(RangeItem(begin, step, k));
}

}  // namespace

Value Interpreter::Eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  EvalDepth depth(*this, e.line);
  Step(e.line);
  Value v = EvalNode(e, scope);
  if (v.Depth() > limits_.max_value_depth) {
    Fail(e.line, "the template built lists or dicts nested deeper than " + std::to_string(limits_.max_value_depth));
  }
  return v;
}

Value Interpreter::EvalNode(const Expr& e, const std::shared_ptr<Scope>& scope) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: return e.literal;
    case Expr::Kind::kName: {
      const Value* v = scope->Find(e.name);
      return v ? *v : Value();
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      List items;
      for (const auto& a : e.args) items.push_back(Eval(*a, scope));
      return NewList(std::move(items), e.line);
    }
    case Expr::Kind::kDict: {
      CheckListSize(e.args.size() / 2, e.line);
      Value d = Value::MakeDict();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value key = Eval(*e.args[i], scope);
        if (!key.is_string()) Fail(e.line, "dict keys must be strings");
        d.dict().Set(key.as_string(), Eval(*e.args[i + 1], scope));
      }
      return d;
    }
    case Expr::Kind::kAttr: {
      const Value object = Eval(*e.args[0], scope);
      if (object.is_undefined()) Fail(e.line, "cannot read '" + e.name + "' of an undefined value");
      if (object.is_dict()) {
        const Value* v = object.dict().Find(e.name);
        return v ? *v : Value();
      }
      return Value();
    }
    case Expr::Kind::kIndex: {
      const Value object = Eval(*e.args[0], scope);
      const Value key = Eval(*e.args[1], scope);
      if (object.is_undefined()) Fail(e.line, "cannot index an undefined value");
      if (object.is_dict() && key.is_string()) {
        const Value* v = object.dict().Find(key.as_string());
        return v ? *v : Value();
      }
      if (object.is_list() && key.is_int()) {
        auto i = PyIndex(key.as_int(), object.list().size());
        return i ? object.list()[*i] : Value();
      }
      if (object.is_string() && key.is_int()) {
        const std::string& s = object.as_string();
        Step(e.line, int64_t(s.size() / 256));
        auto i = PyIndex(key.as_int(), CountCodePoints(s));
        if (!i) return Value();
        const auto [begin, end] = CodePointBytes(s, *i);
        return Value(s.substr(begin, end - begin));
      }
      if (object.is_none()) Fail(e.line, "cannot index a none value");
      return Value();
    }
    case Expr::Kind::kSlice: {
      const Value object = Eval(*e.args[0], scope);
      Value parts[3];
      for (int i = 0; i < 3; ++i) {
        if (e.args[size_t(i) + 1]) parts[i] = Eval(*e.args[size_t(i) + 1], scope);
      }
      if (object.is_list()) {
        const List& items = object.list();
        CheckListSize(items.size(), e.line);  // a slice holds at most every item
        List out;
        PySlice(int64_t(items.size()), parts[0], parts[1], parts[2], e.line, [&](int64_t i) { out.push_back(items[size_t(i)]); });
        return Value::MakeList(std::move(out));
      }
      if (object.is_string()) {
        const std::string& s = object.as_string();
        CheckSize(s.size(), e.line);  // likewise
        std::vector<size_t> starts;   // [code points + 1]: each code point's first byte, then s.size()
        starts.reserve(CountCodePoints(s) + 1);
        for (size_t i = 0; i < s.size(); i += CodePointLength(s, i)) starts.push_back(i);
        starts.push_back(s.size());
        std::string out;
        PySlice(int64_t(starts.size()) - 1, parts[0], parts[1], parts[2], e.line,
                [&](int64_t i) { out.append(s, starts[size_t(i)], starts[size_t(i) + 1] - starts[size_t(i)]); });
        return Value(std::move(out));
      }
      Fail(e.line, "cannot slice a " + std::string(object.TypeName()) + " value");
    }
    case Expr::Kind::kCall: return EvalCall(e, scope);
    case Expr::Kind::kFilter: {
      const Value input = Eval(*e.args[0], scope);
      CallArgs args = EvalArgs(e, 1, scope);
      return ApplyFilter(*this, e.name, input, args);
    }
    case Expr::Kind::kTest: {
      const Value input = Eval(*e.args[0], scope);
      CallArgs args = EvalArgs(e, 1, scope);
      return Value(ApplyTest(*this, e.name, input, args) != e.negated);
    }
    case Expr::Kind::kUnary: {
      const Value v = Eval(*e.args[0], scope);
      if (e.name == "not") return Value(!v.Truthy());
      if (v.is_int() && e.name == "-") {
        if (v.as_int() == INT64_MIN) Fail(e.line, "integer overflow: -(" + std::to_string(v.as_int()) + ")");
        return Value(-v.as_int());
      }
      if (v.is_int()) return v;
      if (v.is_float()) return e.name == "-" ? Value(-v.as_number()) : v;
      Fail(e.line, "bad operand for unary " + e.name + ": " + std::string(v.TypeName()));
    }
    case Expr::Kind::kBinary: return EvalBinary(e, scope);
    case Expr::Kind::kAnd: {
      Value left = Eval(*e.args[0], scope);
      return left.Truthy() ? Eval(*e.args[1], scope) : left;
    }
    case Expr::Kind::kOr: {
      Value left = Eval(*e.args[0], scope);
      return left.Truthy() ? left : Eval(*e.args[1], scope);
    }
    case Expr::Kind::kConditional:
      if (Eval(*e.args[1], scope).Truthy()) return Eval(*e.args[0], scope);
      return e.args[2] ? Eval(*e.args[2], scope) : Value();
  }
  return Value();
}

namespace {

bool Contains(Interpreter& in, const Value& haystack, const Value& needle, int line) {
  if (haystack.is_string()) in.Step(line, int64_t(haystack.as_string().size() / 256));
  switch (haystack.kind()) {
    case Value::Kind::kString:
      if (!needle.is_string()) Interpreter::Fail(line, "'in <string>' needs a string on the left");
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : haystack.list()) {
        if (in.Equal(v, needle, line)) return true;
      }
      return false;
    case Value::Kind::kDict: return needle.is_string() && haystack.dict().Find(needle.as_string()) != nullptr;
    case Value::Kind::kUndefined: return false;
    default: Interpreter::Fail(line, "'in' needs a string, list or dict on the right, got " + std::string(haystack.TypeName()));
  }
}

double FloorMod(double a, double b) {
  const double m = std::fmod(a, b);
  return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
}

}  // namespace

Value Interpreter::EvalBinary(const Expr& e, const std::shared_ptr<Scope>& scope) {
  const std::string& op = e.name;
  const Value l = Eval(*e.args[0], scope);
  const Value r = Eval(*e.args[1], scope);
  if (op == "==") return Value(Equal(l, r, e.line));
  if (op == "!=") return Value(!Equal(l, r, e.line));
  if (op == "in") return Value(Contains(*this, r, l, e.line));
  if (op == "not in") return Value(!Contains(*this, r, l, e.line));
  if (op == "~") return NewString(Str(l, e.line) + Str(r, e.line), e.line);
  const auto fail = [&]() -> Value {
    Fail(e.line, "unsupported operand types for " + op + ": " + std::string(l.TypeName()) + " and " +
                     std::string(r.TypeName()));
  };
  const bool numeric = (l.is_number() || l.is_bool()) && (r.is_number() || r.is_bool());
  const auto as_int = [](const Value& v) { return v.is_bool() ? int64_t(v.as_bool()) : v.as_int(); };
  const bool ints = numeric && !l.is_float() && !r.is_float();
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    int cmp;
    if (numeric) {
      const double a = l.as_number(), b = r.as_number();
      cmp = a < b ? -1 : a > b ? 1 : 0;
    } else if (l.is_string() && r.is_string()) {
      cmp = l.as_string().compare(r.as_string());
    } else {
      return fail();
    }
    if (op == "<") return Value(cmp < 0);
    if (op == ">") return Value(cmp > 0);
    if (op == "<=") return Value(cmp <= 0);
    return Value(cmp >= 0);
  }
  if (op == "+") {
    if (l.is_string() && r.is_string()) {
      CheckSize(l.as_string().size() + r.as_string().size(), e.line);
      return Value(l.as_string() + r.as_string());
    }
    if (l.is_list() && r.is_list()) {
      CheckListSize(l.list().size() + r.list().size(), e.line);
      List items = l.list();
      items.insert(items.end(), r.list().begin(), r.list().end());
      return Value::MakeList(std::move(items));
    }
  }
  if (op == "*" && (l.is_string() || l.is_list()) && r.is_int()) {
    const int64_t n = std::max<int64_t>(0, r.as_int());
    const size_t unit = l.is_string() ? l.as_string().size() : l.list().size();
    size_t total = 0;
    if (__builtin_mul_overflow(unit, uint64_t(n), &total)) total = SIZE_MAX;
    if (l.is_string()) {
      CheckSize(total, e.line);
    } else {
      CheckListSize(total, e.line);
    }
    if (l.is_string()) {
      // Doubling: O(total) copying for any unit, and nothing at all for an empty one.
      std::string s;
      if (unit != 0 && n != 0) {
        s.reserve(total);
        s = l.as_string();
        while (s.size() * 2 <= total) s += s;
        s.append(s, 0, total - s.size());
      }
      return Value(std::move(s));
    }
    List items;
    if (unit != 0) {
      items.reserve(total);
      for (int64_t i = 0; i < n; ++i) items.insert(items.end(), l.list().begin(), l.list().end());
    }
    return Value::MakeList(std::move(items));
  }
  if (!numeric) return fail();
  if (ints) {
    const int64_t a = as_int(l), b = as_int(r);
    // Python's integers are unbounded; ours are 64-bit, and a result past them is an error
    // rather than a silently different number.
    const auto overflow = [&]() -> Value {
      Fail(e.line, "integer overflow: " + std::to_string(a) + " " + op + " " + std::to_string(b));
    };
    int64_t result;
    if (op == "+") return __builtin_add_overflow(a, b, &result) ? overflow() : Value(result);
    if (op == "-") return __builtin_sub_overflow(a, b, &result) ? overflow() : Value(result);
    if (op == "*") return __builtin_mul_overflow(a, b, &result) ? overflow() : Value(result);
    if ((op == "//" || op == "%") && b == 0) Fail(e.line, "division by zero");
    if (op == "//" && a == INT64_MIN && b == -1) return overflow();
    if (op == "%" && b == -1) return Value(int64_t{0});  // a % -1 is 0; INT64_MIN % -1 traps in hardware
    if (op == "//") {
      int64_t q = a / b;
      if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
      return Value(q);
    }
    if (op == "%") {
      int64_t m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) m += b;
      return Value(m);
    }
    if (op == "**" && b >= 0) {
      int64_t p = 1, base = a, exp = b;  // exponentiation by squaring: O(log b)
      bool overflowed = false;
      while (exp > 0 && !overflowed) {
        if (exp & 1) overflowed = __builtin_mul_overflow(p, base, &p);
        exp >>= 1;
        if (exp > 0 && !overflowed) overflowed = __builtin_mul_overflow(base, base, &base);
      }
      return overflowed ? overflow() : Value(p);
    }
  }
  const double a = l.as_number(), b = r.as_number();
  if (op == "+") return Value(a + b);
  if (op == "-") return Value(a - b);
  if (op == "*") return Value(a * b);
  if (op == "**") return Value(std::pow(a, b));
  if (b == 0 && (op == "/" || op == "//" || op == "%")) Fail(e.line, "division by zero");
  if (op == "/") return Value(a / b);
  if (op == "//") return Value(std::floor(a / b));
  if (op == "%") return Value(FloorMod(a, b));
  return fail();
}

}  // namespace mlaserve::jinja
