// Functions templates call by name: range, namespace, raise_exception (Hugging Face's way for
// a template to reject a conversation) and strftime_now (today's date in system prompts).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>

#include "tokenizer/jinja/builtin_args.h"

namespace mlaserve::jinja {
namespace {

Value Range(Interpreter& in, CallArgs& args) {
  for (const Value& v : args.positional) {
    if (!v.is_int()) Interpreter::Fail(args.line, "range() needs integers");
  }
  int64_t start = 0, stop = 0, step = 1;
  if (args.positional.size() == 1) {
    stop = args.positional[0].as_int();
  } else if (args.positional.size() == 2 || args.positional.size() == 3) {
    start = args.positional[0].as_int();
    stop = args.positional[1].as_int();
    if (args.positional.size() == 3) step = args.positional[2].as_int();
  } else {
    Interpreter::Fail(args.line, "range() takes 1 to 3 arguments");
  }
  if (step == 0) Interpreter::Fail(args.line, "range() step must not be zero");
  // Counted exactly: no item overflows, and the list is checked before it is built.
  const uint64_t count = RangeLength(start, stop, step);
  in.CheckListSize(size_t(count), args.line);
  in.Step(args.line, int64_t(count));
  List items;
  items.reserve(size_t(count));
  for (uint64_t k = 0; k < count; ++k) items.emplace_back(RangeItem(start, step, k));
  return Value::MakeList(std::move(items));
}

Value Namespace(Interpreter& in, CallArgs& args) {
  size_t count = args.keyword.size();
  for (const Value& v : args.positional) count += v.is_dict() ? v.dict().items.size() : 0;
  in.CheckListSize(count, args.line);
  Value ns = Value::MakeNamespace();
  for (const Value& v : args.positional) {
    if (!v.is_dict()) Interpreter::Fail(args.line, "namespace() takes a dict or keyword arguments");
    for (const auto& [k, item] : v.dict().items) ns.dict().Set(k, item);
  }
  for (auto& [k, v] : args.keyword) ns.dict().Set(k, v);
  return ns;
}

Value RaiseException(Interpreter&, CallArgs& args) {
  const Value message = Arg(args, 0, "message");
  Interpreter::Fail(args.line, "the chat template refused the request: " + message.Str());
}

Value StrftimeNow(Interpreter&, CallArgs& args) {
  const std::string format = ExpectString(Arg(args, 0, "format"), "strftime_now", args.line);
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &local);
  return Value(std::string(buf, n));
}

void Add(Dict& globals, const std::string& name, Value (*fn)(Interpreter&, CallArgs&)) {
  auto callable = std::make_shared<Callable>();
  callable->name = name;
  callable->call = fn;
  globals.Set(name, Value::MakeCallable(std::move(callable)));
}

}  // namespace

void AddGlobalFunctions(Dict& globals) {
  Add(globals, "range", Range);
  Add(globals, "namespace", Namespace);
  Add(globals, "raise_exception", RaiseException);
  Add(globals, "strftime_now", StrftimeNow);
}

}  // namespace mlaserve::jinja
