// Tokens to the statement tree, with jinja2's grammar and operator precedence:
//   cond (a if b else c) < or < and < not < comparisons (== != < <= > >= in, not in)
//   < + - < ~ < * / // % < ** < unary - + < postfix (.attr [item] (call)) and filters / tests.
// A tag the interpreter does not implement (extends, include, import, block, ...) is an
// error naming it and its line, so a template the engine cannot render fails at start-up.
#pragma once

#include <vector>

#include "core/result.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace infercept::jinja {

// Expressions and blocks nest this deep at most (the parser and the evaluator recurse once
// a level).
inline constexpr int kMaxParseDepth = 200;

Result<Body> parse(const std::vector<Token>& tokens);

}  // namespace infercept::jinja
