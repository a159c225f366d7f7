// Template source -> tokens. Text between tags is cut with Jinja's whitespace rules as Hugging
// Face configures them for chat templates: trim_blocks (the newline after a block or comment
// tag is dropped), lstrip_blocks (spaces and tabs before a block or comment tag on its own
// line are dropped), `-` on a tag strips all whitespace on that side, and one trailing newline
// of the template is dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mlaserve::jinja {

enum class TokenKind {
  kText,        // literal output
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // text holds the decoded string
  kInt,
  kFloat,
  kOperator,    // text holds the operator: + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
  kEnd,
};

struct Token {
  TokenKind kind;
  std::string text;
  int line = 1;  // 1-based line of the token's first character
};

// Errors name the template line: "line 3: unterminated string".
Result<std::vector<Token>> Lex(std::string_view source);

}  // namespace mlaserve::jinja
