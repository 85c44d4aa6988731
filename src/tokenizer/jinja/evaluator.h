// Runs a parsed template: statements write to the output, expressions compute values, with
// jinja2's scoping (a for loop's body is a fresh scope each iteration, `if` is none, a macro
// sees the scope it was defined in) and its Undefined (falsy, prints as nothing, an error
// when one looks inside it). Throws TemplateError (template.cpp turns it into a Result).
#pragma once

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/template.h"

namespace infercept::jinja {

Str evaluate(const Body& body, const DictData& context, const RenderOptions& options);

}  // namespace infercept::jinja
