// Runs a parsed template against a context. Every render is bounded: a step budget (each
// expression and statement costs one; loops count every iteration), an output cap that also
// caps any single string or list built on the way, and a macro call depth, so neither a
// hostile template nor a hostile message can hang or exhaust the server.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace mlaserve::jinja {

struct RenderLimits {
  size_t max_output_bytes = 16u << 20;  // also the largest string or list (elements) built
  int64_t max_steps = 20'000'000;       // expressions + statements + loop iterations
  int max_call_depth = 32;              // nested macro calls
  int max_value_depth = 100;            // lists and dicts inside each other (Value::Depth; request bodies nest at most 64)
};

// A render error, thrown inside the interpreter and its builtins and returned as a Status
// ("line N: message") by Render().
struct RenderError {
  int line;
  std::string message;
};

struct Scope {
  std::shared_ptr<Scope> parent;
  Dict vars;
  const Value* Find(std::string_view name) const;
};

class Interpreter {
 public:
  explicit Interpreter(const RenderLimits& limits) : limits_(limits) {}

  // Renders `body` with `globals` (the template variables) visible everywhere.
  Result<std::string> Render(const Body& body, Dict globals);

  // For builtins.
  [[noreturn]] static void Fail(int line, std::string message) { throw RenderError{line, std::move(message)}; }
  Value Call(const Value& callee, CallArgs& args, int line);
  // A string or list of `size` bytes (elements) is about to be built: fails past the output
  // cap, and charges the copy to the step budget (one step per 256), so that repeated large
  // copies cannot run for long either.
  void CheckSize(size_t size, int line);
  void Step(int line, int64_t n = 1);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow ExecBody(const Body& body, const std::shared_ptr<Scope>& scope);
  Flow Exec(const Stmt& s, const std::shared_ptr<Scope>& scope);
  void ExecFor(const Stmt& s, const std::shared_ptr<Scope>& scope);
  void ExecSet(const Stmt& s, const std::shared_ptr<Scope>& scope);
  void DefineMacro(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Value Eval(const Expr& e, const std::shared_ptr<Scope>& scope);  // EvalNode within the limits
  Value EvalNode(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value EvalBinary(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value EvalCall(const Expr& e, const std::shared_ptr<Scope>& scope);
  CallArgs EvalArgs(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope);
  void Emit(const std::string& text, int line);

  RenderLimits limits_;
  std::string* out_ = nullptr;  // where Emit writes: the output, or a block set's capture
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

// Builtins, in their own files.
Value ApplyFilter(Interpreter& in, const std::string& name, const Value& input, CallArgs& args);  // filters.cc
bool ApplyTest(Interpreter& in, const std::string& name, const Value& input, CallArgs& args);     // tests.cc
bool HasMethod(const Value& object, std::string_view name);                                        // methods.cc
Value CallMethod(Interpreter& in, const Value& object, const std::string& name, CallArgs& args);  // methods.cc
void AddGlobalFunctions(Dict& globals);                                                            // globals.cc
// Python's json.dumps(value, ensure_ascii=False, indent=indent, separators=...) (tojson.cc).
std::string ToJson(Interpreter& in, const Value& v, int indent, const std::string& item_separator,
                   const std::string& key_separator, int line);

}  // namespace mlaserve::jinja
