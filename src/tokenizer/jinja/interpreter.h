// Runs a parsed template against a context. Every render is bounded, so that neither a hostile
// template nor a hostile message (a client's messages and chat_template_kwargs are template
// variables) can hang, crash or exhaust the server:
//  - a step budget: each expression and statement costs one, loops count every iteration, and
//    builtins charge the work they do on long strings and lists;
//  - a cap on every string and list built, intermediate ones included, checked before it is
//    built wherever its size can be known first;
//  - a budget of bytes allocated over the whole render (every string, list and dict built),
//    and one over all the renders of a template running at once (a server renders on up to
//    512 threads);
//  - a bound on nesting: macro calls, and the interpreter's own recursion (expressions within
//    expressions, blocks within blocks), so the stack cannot overflow;
//  - checked integer arithmetic: overflow and INT64_MIN // -1 are errors, not wrap-around.
// Each limit, when hit, fails the render with a message naming it (a 400 for a server request).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace mlaserve::jinja {

struct RenderLimits {
  size_t max_output_bytes = 16u << 20;    // the rendered prompt; also the largest string or list built (bytes; a list
                                          // counts sizeof(Value) per element)
  size_t max_render_bytes = 128u << 20;   // all strings, lists and dicts built during one render, added up
  size_t max_concurrent_render_bytes = 1u << 30;  // the same over all renders of one Template running at once
  int64_t max_steps = 20'000'000;         // expressions + statements + loop iterations + charged work
  int max_call_depth = 32;                // nested macro calls
  int max_value_depth = 100;              // lists and dicts inside each other (Value::Depth; request bodies nest at most 64)
  int max_eval_depth = 2000;              // the interpreter's recursion: expressions, blocks and macro calls nested
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
  // `concurrent_bytes` (may be null): the bytes allocated by all renders of the same template
  // now running, shared by them; this render adds its own while it runs and takes them back
  // when it ends.
  explicit Interpreter(const RenderLimits& limits, std::atomic<size_t>* concurrent_bytes = nullptr)
      : limits_(limits), concurrent_bytes_(concurrent_bytes) {}

  // Renders `body` with `globals` (the template variables) visible everywhere.
  Result<std::string> Render(const Body& body, Dict globals);

  // For builtins.
  [[noreturn]] static void Fail(int line, std::string message) { throw RenderError{line, std::move(message)}; }
  const RenderLimits& limits() const { return limits_; }
  // For builders that grow a string piece by piece: fails once `size` passes the value cap,
  // charging nothing (charge the finished value once, with CheckSize or NewString).
  void CheckGrowing(size_t size, int line) {
    if (size > limits_.max_output_bytes) CheckSize(size, line);
  }
  Value Call(const Value& callee, CallArgs& args, int line);
  // A string of `size` bytes is about to be built: fails past the value cap or the render's
  // byte budget, and charges the copy to both budgets (one step per 256 bytes), so that
  // repeated large copies cannot run for long either. Call it before building where the size
  // can be known (predicted) first, else right after.
  void CheckSize(size_t size, int line);
  // The same for a list (or dict) of `count` elements.
  void CheckListSize(size_t count, int line);
  void Step(int line, int64_t n = 1);
  // Checked and charged constructors for what builtins return.
  Value NewString(std::string s, int line);
  Value NewList(List items, int line);
  // Python's str() of `v`, within the value cap and charged.
  std::string Str(const Value& v, int line);
  // Python's ==, charged one step per value compared.
  bool Equal(const Value& a, const Value& b, int line);

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
  std::atomic<size_t>* concurrent_bytes_;
  std::string* out_ = nullptr;  // where Emit writes: the output, or a block set's capture
  int64_t steps_ = 0;
  size_t allocated_bytes_ = 0;  // charged to limits_.max_render_bytes
  int call_depth_ = 0;
  int eval_depth_ = 0;  // Eval + ExecBody frames now on the stack
  friend struct EvalDepth;
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
