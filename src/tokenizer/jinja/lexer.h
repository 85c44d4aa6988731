// The template's source to tokens, as jinja2's lexer makes them in the environment
// transformers renders chat templates with: trim_blocks (the newline after a block tag is
// dropped), lstrip_blocks (blanks before a block or comment tag on its line are dropped),
// `-` and `+` on tags, newlines normalized to \n, one trailing newline of the source dropped,
// {% raw %} blocks, and tag ends recognised only outside brackets.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"

namespace infercept::jinja {

enum class TokenType {
  text,         // template data between tags
  var_begin,    // {{
  var_end,      // }}
  block_begin,  // {%
  block_end,    // %}
  name,
  string,  // value: the unescaped text
  integer,
  floating,
  op,  // operators and punctuation: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } . , : |
  eof,
};

struct Token {
  TokenType type;
  std::string value;
  int line;
};

Result<std::vector<Token>> tokenize(const std::string& source);

}  // namespace infercept::jinja
