// Tokens -> statement tree. The statements chat templates use: if/elif/else, for (with an
// `if` filter and else), set (names, tuples, namespace attributes, block form), macro,
// break/continue, and generation (rendered as its body). Errors name the line.
#pragma once

#include <span>

#include "core/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace mlaserve::jinja {

Result<Body> Parse(std::span<const Token> tokens);

}  // namespace mlaserve::jinja
