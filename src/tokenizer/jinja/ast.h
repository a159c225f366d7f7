// The parsed template: expressions and statements as plain trees. Each node keeps its source
// line so that render errors name it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace mlaserve::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kList,       // args: items
    kTuple,      // args: items (evaluates to a list)
    kDict,       // args: key0, value0, key1, value1, ...
    kAttr,       // args[0].name
    kIndex,      // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]] (null pointers for omitted parts)
    kCall,       // args[0](args[1..], kwargs)
    kFilter,     // args[0] | name(args[1..], kwargs)
    kTest,       // args[0] is [not] name(args[1..])
    kUnary,      // op args[0]: "not", "-", "+"
    kBinary,     // args[0] op args[1]: + - * / // % ** ~ == != < > <= >= in "not in"
    kAnd,
    kOr,
    kConditional,  // args[0] if args[1] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  int line = 0;
  std::string name;  // kName / kAttr / kFilter / kTest: the identifier; kUnary / kBinary: op
  bool negated = false;  // kTest: `is not`
  Value literal;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  int height = 1;  // 1 + the tallest operand's height (the parser bounds it)
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (conditions[i] -> bodies[i]); else_body
    kFor,       // for targets in expr [if filter]: body; else_body
    kSet,       // set targets = expr, or set ns.attr = expr, or {% set x %}body{% endset %}
    kMacro,     // macro name(params): body
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kFor (iterable), kSet (value, or null for block set)
  ExprPtr filter;                    // kFor: `if` condition
  std::vector<std::string> targets;  // kFor, kSet: names (kSet with attr: {namespace, attr})
  bool set_attr = false;             // kSet: targets are {namespace name, attribute}
  std::vector<ExprPtr> conditions;   // kIf
  std::vector<Body> bodies;          // kIf: one per condition
  Body body;                         // kFor, kSet (block), kMacro
  Body else_body;                    // kIf, kFor
  std::string name;                  // kMacro
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: name, default (or null)
};

}  // namespace mlaserve::jinja
