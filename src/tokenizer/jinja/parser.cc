// A recursive-descent parser with Jinja2's precedence, lowest first: `x if c else y`, or, and,
// not, comparisons (== != < > <= >= in, not in), + -, ~, * / // %, **, unary - +, then
// postfix (.attr, [index], [a:b:c], call), filters (|f) and tests (is [not] t).
// Errors are thrown as ParseError inside and returned as a Status at Parse().
#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <cstdlib>

namespace mlaserve::jinja {
namespace {

constexpr int kMaxNesting = 200;  // blocks and parentheses; a hostile template cannot overflow the stack
// Operator chains (`1 + 1 + ...`, `x|trim|trim...`, `f(1)(1)...`) are parsed by loops, not
// recursion, but they build trees as tall as they are long, which evaluating and destroying
// would walk recursively: a tree taller than this is refused while it is being built.
constexpr int kMaxExprHeight = 256;

struct ParseError {
  int line;
  std::string message;
};

class Parser {
 public:
  explicit Parser(std::span<const Token> tokens) : tokens_(tokens) {}

  Body ParseTemplate() {
    std::string end;
    Body body = ParseBody({}, &end);
    return body;
  }

 private:
  const Token& Peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  [[noreturn]] void Fail(const std::string& message) const { throw ParseError{Peek().line, message}; }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kOperator && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kName && Peek(ahead).text == name;
  }
  void ExpectOp(std::string_view op) {
    if (!IsOp(op)) Fail("expected '" + std::string(op) + "', got " + Describe(Peek()));
    Next();
  }
  std::string ExpectName() {
    if (Peek().kind != TokenKind::kName) Fail("expected a name, got " + Describe(Peek()));
    return Next().text;
  }
  void ExpectBlockEnd() {
    if (Peek().kind != TokenKind::kBlockEnd) Fail("expected '%}', got " + Describe(Peek()));
    Next();
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kText: return "text";
      case TokenKind::kVarBegin: return "'{{'";
      case TokenKind::kVarEnd: return "'}}'";
      case TokenKind::kBlockBegin: return "'{%'";
      case TokenKind::kBlockEnd: return "'%}'";
      case TokenKind::kName: return "'" + t.text + "'";
      case TokenKind::kString: return "a string";
      case TokenKind::kInt:
      case TokenKind::kFloat: return "'" + t.text + "'";
      case TokenKind::kOperator: return "'" + t.text + "'";
      case TokenKind::kEnd: return "the end of the template";
    }
    return "?";
  }

  struct Depth {
    explicit Depth(Parser* p) : parser(p) {
      if (++parser->depth_ > kMaxNesting) parser->Fail("nesting deeper than " + std::to_string(kMaxNesting));
    }
    ~Depth() { --parser->depth_; }
    Parser* parser;
  };

  // Statements until one of `enders` (a block keyword); *ender gets it. At top level (no
  // enders) runs to the end of the tokens.
  Body ParseBody(std::initializer_list<std::string_view> enders, std::string* ender) {
    Depth depth(this);
    Body body;
    while (true) {
      const Token& t = Peek();
      if (t.kind == TokenKind::kEnd) {
        if (enders.size() != 0) {
          std::string names;
          for (std::string_view e : enders) names += (names.empty() ? "'" : " or '") + std::string(e) + "'";
          Fail("unexpected end of template, expected " + names);
        }
        return body;
      }
      if (t.kind == TokenKind::kText) {
        auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::kText, .line = t.line, .text = t.text});
        body.push_back(std::move(s));
        Next();
        continue;
      }
      if (t.kind == TokenKind::kVarBegin) {
        Next();
        auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::kOutput, .line = t.line});
        s->expr = ParseExpression();
        if (Peek().kind != TokenKind::kVarEnd) Fail("expected '}}', got " + Describe(Peek()));
        Next();
        body.push_back(std::move(s));
        continue;
      }
      if (t.kind != TokenKind::kBlockBegin) Fail("unexpected " + Describe(t));
      const Token& keyword = Peek(1);
      if (keyword.kind != TokenKind::kName) {
        Next();
        Fail("expected a statement name, got " + Describe(keyword));
      }
      for (std::string_view e : enders) {
        if (keyword.text == e) {
          Next();
          Next();
          *ender = keyword.text;
          return body;
        }
      }
      Next();
      body.push_back(ParseStatement());
    }
  }

  std::unique_ptr<Stmt> ParseStatement() {
    const Token& keyword = Next();
    const int line = keyword.line;
    const std::string& k = keyword.text;
    if (k == "if") return ParseIf(line);
    if (k == "for") return ParseFor(line);
    if (k == "set") return ParseSet(line);
    if (k == "macro") return ParseMacro(line);
    if (k == "break" || k == "continue") {
      ExpectBlockEnd();
      return std::make_unique<Stmt>(Stmt{.kind = k == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, .line = line});
    }
    if (k == "generation") {
      // Hugging Face's assistant-mask marker: renders as its body.
      ExpectBlockEnd();
      std::string end;
      auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::kIf, .line = line});
      s->conditions.push_back(Literal(Value(true), line));
      s->bodies.push_back(ParseBody({"endgeneration"}, &end));
      ExpectBlockEnd();
      return s;
    }
    pos_ -= 1;
    Fail("unknown statement '" + k + "'");
  }

  std::unique_ptr<Stmt> ParseIf(int line) {
    auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::kIf, .line = line});
    while (true) {
      s->conditions.push_back(ParseExpression());
      ExpectBlockEnd();
      std::string end;
      s->bodies.push_back(ParseBody({"elif", "else", "endif"}, &end));
      if (end == "elif") continue;
      if (end == "else") {
        ExpectBlockEnd();
        s->else_body = ParseBody({"endif"}, &end);
      }
      ExpectBlockEnd();
      return s;
    }
  }

  std::unique_ptr<Stmt> ParseFor(int line) {
    auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::kFor, .line = line});
    s->targets.push_back(ExpectName());
    while (IsOp(",")) {
      Next();
      s->targets.push_back(ExpectName());
    }
    if (!IsName("in")) Fail("expected 'in', got " + Describe(Peek()));
    Next();
    s->expr = ParseOr(/*allow_conditional=*/false);  // `if` after the iterable is the loop filter
    if (IsName("if")) {
      Next();
      s->filter = ParseExpression();
    }
    if (IsName("recursive")) Fail("recursive loops are not supported");
    ExpectBlockEnd();
    std::string end;
    s->body = ParseBody({"else", "endfor"}, &end);
    if (end == "else") {
      ExpectBlockEnd();
      s->else_body = ParseBody({"endfor"}, &end);
    }
    ExpectBlockEnd();
    return s;
  }

  std::unique_ptr<Stmt> ParseSet(int line) {
    auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::kSet, .line = line});
    s->targets.push_back(ExpectName());
    if (IsOp(".")) {
      Next();
      s->targets.push_back(ExpectName());
      s->set_attr = true;
    } else {
      while (IsOp(",")) {
        Next();
        s->targets.push_back(ExpectName());
      }
    }
    if (Peek().kind == TokenKind::kBlockEnd && !s->set_attr && s->targets.size() == 1) {
      Next();
      std::string end;
      s->body = ParseBody({"endset"}, &end);
      ExpectBlockEnd();
      return s;
    }
    ExpectOp("=");
    s->expr = ParseTupleOrExpression();
    ExpectBlockEnd();
    return s;
  }

  std::unique_ptr<Stmt> ParseMacro(int line) {
    auto s = std::make_unique<Stmt>(Stmt{.kind = Stmt::Kind::kMacro, .line = line});
    s->name = ExpectName();
    ExpectOp("(");
    while (!IsOp(")")) {
      std::string param = ExpectName();
      ExprPtr def;
      if (IsOp("=")) {
        Next();
        def = ParseExpression();
      }
      s->params.emplace_back(std::move(param), std::move(def));
      if (!IsOp(",")) break;
      Next();
    }
    ExpectOp(")");
    ExpectBlockEnd();
    std::string end;
    s->body = ParseBody({"endmacro"}, &end);
    ExpectBlockEnd();
    return s;
  }

  // ---- expressions ----

  // Makes `child` (null for an omitted part) an operand of `parent`, keeping parent.height.
  void Attach(Expr& parent, ExprPtr child) {
    if (child) GrowOver(parent, *child);
    parent.args.push_back(std::move(child));
  }
  void AttachKeyword(Expr& parent, std::string key, ExprPtr child) {
    GrowOver(parent, *child);
    parent.kwargs.emplace_back(std::move(key), std::move(child));
  }
  void GrowOver(Expr& parent, const Expr& child) {
    parent.height = std::max(parent.height, child.height + 1);
    if (parent.height > kMaxExprHeight) {
      Fail("an expression nested deeper than " + std::to_string(kMaxExprHeight) + " operators");
    }
  }

  ExprPtr Make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  ExprPtr Literal(Value v, int line) {
    ExprPtr e = Make(Expr::Kind::kLiteral, line);
    e->literal = std::move(v);
    return e;
  }

  // `a, b` without brackets (in set) is a tuple.
  ExprPtr ParseTupleOrExpression() {
    const int line = Peek().line;
    ExprPtr first = ParseExpression();
    if (!IsOp(",")) return first;
    ExprPtr t = Make(Expr::Kind::kTuple, line);
    Attach(*t, std::move(first));
    while (IsOp(",")) {
      Next();
      Attach(*t, ParseExpression());
    }
    return t;
  }

  ExprPtr ParseExpression() { return ParseOr(/*allow_conditional=*/true); }

  ExprPtr ParseOr(bool allow_conditional) {
    Depth depth(this);
    ExprPtr left = ParseAnd();
    while (IsName("or")) {
      const int line = Next().line;
      ExprPtr e = Make(Expr::Kind::kOr, line);
      Attach(*e, std::move(left));
      Attach(*e, ParseAnd());
      left = std::move(e);
    }
    if (allow_conditional && IsName("if")) {
      const int line = Next().line;
      ExprPtr e = Make(Expr::Kind::kConditional, line);
      Attach(*e, std::move(left));
      Attach(*e, ParseOr(false));
      if (IsName("else")) {
        Next();
        Attach(*e, ParseOr(true));
      } else {
        Attach(*e, nullptr);
      }
      return e;
    }
    return left;
  }

  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (IsName("and")) {
      const int line = Next().line;
      ExprPtr e = Make(Expr::Kind::kAnd, line);
      Attach(*e, std::move(left));
      Attach(*e, ParseNot());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      Depth depth(this);
      const int line = Next().line;
      ExprPtr e = Make(Expr::Kind::kUnary, line);
      e->name = "not";
      Attach(*e, ParseNot());
      return e;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    ExprPtr left = ParseMath1();
    while (true) {
      std::string op;
      const int line = Peek().line;
      if (Peek().kind == TokenKind::kOperator &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
           Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        op = "not in";
      } else {
        return left;
      }
      ExprPtr e = Make(Expr::Kind::kBinary, line);
      e->name = op;
      Attach(*e, std::move(left));
      Attach(*e, ParseMath1());
      left = std::move(e);
    }
  }

  ExprPtr Binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    ExprPtr e = Make(Expr::Kind::kBinary, line);
    e->name = std::move(op);
    Attach(*e, std::move(left));
    Attach(*e, std::move(right));
    return e;
  }

  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token& t = Next();
      left = Binary(t.text, std::move(left), ParseConcat(), t.line);
    }
    return left;
  }

  ExprPtr ParseConcat() {
    ExprPtr left = ParseMath2();
    while (IsOp("~")) {
      const Token& t = Next();
      left = Binary("~", std::move(left), ParseMath2(), t.line);
    }
    return left;
  }

  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& t = Next();
      left = Binary(t.text, std::move(left), ParsePow(), t.line);
    }
    return left;
  }

  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (IsOp("**")) {
      const Token& t = Next();
      left = Binary("**", std::move(left), ParseUnary(true), t.line);
    }
    return left;
  }

  ExprPtr ParseUnary(bool with_filter) {
    Depth depth(this);
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      const Token& t = Next();
      e = Make(Expr::Kind::kUnary, t.line);
      e->name = t.text;
      Attach(*e, ParseUnary(false));
    } else {
      e = ParsePrimary();
    }
    e = ParsePostfix(std::move(e));
    if (with_filter) e = ParseFiltersAndTests(std::move(e));
    return e;
  }

  ExprPtr ParsePrimary() {
    Depth depth(this);
    const Token& t = Next();
    switch (t.kind) {
      case TokenKind::kName: {
        if (t.text == "true" || t.text == "True") return Literal(Value(true), t.line);
        if (t.text == "false" || t.text == "False") return Literal(Value(false), t.line);
        if (t.text == "none" || t.text == "None") return Literal(Value::None(), t.line);
        ExprPtr e = Make(Expr::Kind::kName, t.line);
        e->name = t.text;
        return e;
      }
      case TokenKind::kString: {
        std::string s = t.text;
        while (Peek().kind == TokenKind::kString) s += Next().text;  // "a" "b" is "ab"
        return Literal(Value(std::move(s)), t.line);
      }
      case TokenKind::kInt: {
        errno = 0;
        const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) return Literal(Value(std::strtod(t.text.c_str(), nullptr)), t.line);
        return Literal(Value(int64_t(v)), t.line);
      }
      case TokenKind::kFloat: return Literal(Value(std::strtod(t.text.c_str(), nullptr)), t.line);
      case TokenKind::kOperator: {
        if (t.text == "(") {
          if (IsOp(")")) {
            Next();
            return Make(Expr::Kind::kTuple, t.line);
          }
          ExprPtr first = ParseExpression();
          if (IsOp(")")) {
            Next();
            return first;
          }
          ExprPtr tuple = Make(Expr::Kind::kTuple, t.line);
          Attach(*tuple, std::move(first));
          while (IsOp(",")) {
            Next();
            if (IsOp(")")) break;
            Attach(*tuple, ParseExpression());
          }
          ExpectOp(")");
          return tuple;
        }
        if (t.text == "[") {
          ExprPtr list = Make(Expr::Kind::kList, t.line);
          while (!IsOp("]")) {
            Attach(*list, ParseExpression());
            if (!IsOp(",")) break;
            Next();
          }
          ExpectOp("]");
          return list;
        }
        if (t.text == "{") {
          ExprPtr dict = Make(Expr::Kind::kDict, t.line);
          while (!IsOp("}")) {
            Attach(*dict, ParseExpression());
            ExpectOp(":");
            Attach(*dict, ParseExpression());
            if (!IsOp(",")) break;
            Next();
          }
          ExpectOp("}");
          return dict;
        }
        break;
      }
      default: break;
    }
    pos_ -= 1;
    Fail("unexpected " + Describe(t));
  }

  ExprPtr ParsePostfix(ExprPtr e) {
    while (true) {
      const int line = Peek().line;
      if (IsOp(".")) {
        Next();
        ExprPtr a = Make(Expr::Kind::kAttr, line);
        if (Peek().kind == TokenKind::kInt) {
          a = Make(Expr::Kind::kIndex, line);  // x.0 is x[0]
          Attach(*a, std::move(e));
          Attach(*a, Literal(Value(int64_t(std::strtoll(Next().text.c_str(), nullptr, 10))), line));
        } else {
          a->name = ExpectName();
          Attach(*a, std::move(e));
        }
        e = std::move(a);
      } else if (IsOp("[")) {
        Next();
        e = ParseSubscript(std::move(e), line);
      } else if (IsOp("(")) {
        Next();
        ExprPtr call = Make(Expr::Kind::kCall, line);
        Attach(*call, std::move(e));
        ParseCallArgs(call.get());
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr target, int line) {
    ExprPtr parts[3];
    bool is_slice = false;
    for (int i = 0; i < 3; ++i) {
      if (!IsOp(":") && !IsOp("]")) parts[i] = ParseExpression();
      if (i < 2 && IsOp(":")) {
        Next();
        is_slice = true;
        continue;
      }
      break;
    }
    ExpectOp("]");
    if (!is_slice) {
      if (!parts[0]) Fail("empty subscript");
      ExprPtr e = Make(Expr::Kind::kIndex, line);
      Attach(*e, std::move(target));
      Attach(*e, std::move(parts[0]));
      return e;
    }
    ExprPtr e = Make(Expr::Kind::kSlice, line);
    Attach(*e, std::move(target));
    for (auto& p : parts) Attach(*e, std::move(p));
    return e;
  }

  // After '(': positional and keyword arguments up to ')'.
  void ParseCallArgs(Expr* call) {
    while (!IsOp(")")) {
      if (Peek().kind == TokenKind::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        Next();
        AttachKeyword(*call, std::move(key), ParseExpression());
      } else {
        if (!call->kwargs.empty()) Fail("positional argument after keyword argument");
        Attach(*call, ParseExpression());
      }
      if (!IsOp(",")) break;
      Next();
    }
    ExpectOp(")");
  }

  ExprPtr ParseFiltersAndTests(ExprPtr e) {
    while (true) {
      const int line = Peek().line;
      if (IsOp("|")) {
        Next();
        ExprPtr f = Make(Expr::Kind::kFilter, line);
        f->name = ExpectName();
        Attach(*f, std::move(e));
        if (IsOp("(")) {
          Next();
          ParseCallArgs(f.get());
        }
        e = ParsePostfix(std::move(f));
      } else if (IsName("is")) {
        Next();
        ExprPtr t = Make(Expr::Kind::kTest, line);
        if (IsName("not")) {
          Next();
          t->negated = true;
        }
        t->name = ExpectName();
        Attach(*t, std::move(e));
        if (IsOp("(")) {
          Next();
          ParseCallArgs(t.get());
        } else if ((Peek().kind == TokenKind::kString || Peek().kind == TokenKind::kInt ||
                    Peek().kind == TokenKind::kFloat ||
                    (Peek().kind == TokenKind::kName && !IsName("and") && !IsName("or") && !IsName("else") &&
                     !IsName("if") && !IsName("is") && !IsName("in") && !IsName("not")))) {
          Attach(*t, ParsePrimary());  // `is equalto 'x'`
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::span<const Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<Body> Parse(std::span<const Token> tokens) {
  try {
    return Parser(tokens).ParseTemplate();
  } catch (const ParseError& e) {
    return Status::Error("line " + std::to_string(e.line) + ": " + e.message);
  }
}

}  // namespace mlaserve::jinja
