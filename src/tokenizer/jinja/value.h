// The values a chat template computes with: Jinja's undefined, none, bool, int, float, string,
// list, dict (insertion-ordered, string keys) and callables (macros, builtin functions).
// Lists and dicts are shared by reference, as in Python: `ns.x = 1` and `list.append(x)` are
// seen through every name that holds the same object. Strings are immutable and shared too, so
// copying any Value costs O(1) and never allocates: what a render allocates is what it builds,
// which the interpreter charges to its budget (interpreter.h, RenderLimits).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlaserve::jinja {

class Value;
using List = std::vector<Value>;
struct Dict;
struct Callable;
struct ListData;

struct Undefined {
  bool operator==(const Undefined&) const = default;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // undefined
  static Value None() { return Value(Storage(nullptr)); }
  Value(bool b) : v_(b) {}               // NOLINT: literals convert implicitly
  Value(int64_t i) : v_(i) {}            // NOLINT
  Value(int i) : v_(int64_t{i}) {}       // NOLINT
  Value(double d) : v_(d) {}             // NOLINT
  Value(std::string s) : v_(std::make_shared<const std::string>(std::move(s))) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}  // NOLINT
  static Value MakeList(List items = {});
  static Value MakeDict();
  static Value MakeNamespace();
  static Value MakeCallable(std::shared_ptr<const Callable> callable);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_number() const { return is_int() ? double(as_int()) : is_bool() ? as_bool() : std::get<double>(v_); }
  const std::string& as_string() const { return *std::get<std::shared_ptr<const std::string>>(v_); }
  List& list() const;
  Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(v_); }

  // Python truthiness: undefined, none, false, 0, "", [] and {} are false.
  bool Truthy() const;
  // Python's str(): None, True, 1.5, ['a', 1], {'k': 'v'}; undefined is "".
  std::string Str() const;
  // Python's repr() (strings quoted), used inside list and dict printing.
  std::string Repr() const;
  // Appends str() (or repr()) of this value to *out, stopping once *out holds more than
  // `max_bytes`: returns false then, leaving *out truncated. Lists shared by reference print
  // once per reference, so a printout can be exponentially larger than the values behind it;
  // the interpreter always prints through this bound.
  bool AppendStr(std::string* out, size_t max_bytes) const;
  bool AppendRepr(std::string* out, size_t max_bytes) const;
  // Deep equality with Python's rules (1 == 1.0 == True).
  bool Equals(const Value& other) const;
  // The same, visiting at most *nodes_left values (decremented by those visited): nullopt once
  // the budget runs out (two DAGs of shared lists can take exponential time to compare). The
  // same list or dict object equals itself without a walk.
  std::optional<bool> Equals(const Value& other, int64_t* nodes_left) const;
  std::string_view TypeName() const;
  // How deeply lists and dicts nest inside this value (0 for a scalar, 1 for a flat list),
  // kept by the containers so that no walk is needed: the interpreter caps it, which bounds
  // every recursion over values (printing, ==, tojson, destruction).
  int Depth() const;

  static Value FromJson(const nlohmann::json& j);
  static Value FromJson(const nlohmann::ordered_json& j);

 private:
  using Storage = std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::shared_ptr<const std::string>,
                               std::shared_ptr<ListData>, std::shared_ptr<Dict>,
                               std::shared_ptr<const Callable>>;
  explicit Value(Storage v) : v_(std::move(v)) {}
  Storage v_;
};

struct ListData {
  List items;
  int depth = 1;  // 1 + the deepest item's Depth()
};

// Insertion-ordered, as Python dicts and the JSON a client sent.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // only namespace() objects accept `{% set ns.attr = ... %}`
  int depth = 1;              // at least 1 + every value's Depth() (only grows)

  const Value* Find(std::string_view key) const;
  void Set(const std::string& key, Value value);  // keeps `depth`
};

inline List& Value::list() const { return std::get<std::shared_ptr<ListData>>(v_)->items; }

class Interpreter;  // render.h
struct CallArgs {
  List positional;
  std::vector<std::pair<std::string, Value>> keyword;
  int line = 0;
};

// A macro ({% macro %}) or a builtin function (range, namespace, raise_exception, ...).
struct Callable {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> call;
};

// UTF-8 code points of `s`, each as its own string (Python iterates strings this way).
std::vector<std::string> CodePoints(std::string_view s);
// The length in bytes of the code point starting at byte i < s.size() (a lead byte's count,
// cut at the end of s; a stray continuation byte counts as one).
size_t CodePointLength(std::string_view s, size_t i);
// How many code points CodePoints(s) would return, without building them.
size_t CountCodePoints(std::string_view s);
// The byte range [begin, end) of code point `index` of `s` (index < CountCodePoints(s)).
std::pair<size_t, size_t> CodePointBytes(std::string_view s, size_t index);
// How many items Python's range(start, stop, step) holds (step != 0), and its k-th item:
// exact for any 64-bit arguments (no intermediate value overflows).
uint64_t RangeLength(int64_t start, int64_t stop, int64_t step);
inline int64_t RangeItem(int64_t start, int64_t step, uint64_t k) {
  return int64_t(uint64_t(start) + k * uint64_t(step));  // wraps back into range: the true value fits
}
// Python's repr() of a float: shortest round-trip digits, always with '.' or an exponent.
std::string FormatFloat(double d);

}  // namespace mlaserve::jinja
