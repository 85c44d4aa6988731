// JSON Schema -> grammar nodes (grammar.h). What is supported, and how:
//   type (object, array, string, number, integer, boolean, null, and lists of them), enum,
//   const, properties (written in the order of the parsed object, which sorts keys; optional ones
//   may be left out), required, additionalProperties (false: closed; true, absent or a schema:
//   extra properties after or between the declared ones), items, minItems, maxItems, minLength,
//   maxLength, pattern (an ECMAScript subset, regex.h), minimum, maximum, exclusiveMinimum,
//   exclusiveMaximum (numbers, or draft 4's booleans) and multipleOf (number_range.h), anyOf
//   and oneOf (both read as anyOf: an instance matching several alternatives is not refused),
//   allOf of one schema, $ref to "#" or a JSON pointer inside the document ($defs,
//   definitions; recursion works, a cycle with no finite instance is an error);
//   minProperties, maxProperties and uniqueItems where they change nothing (at most the
//   required properties; at least every property of a closed object; at most one item).
//   Annotations are ignored: title, description, default, examples, format (an annotation
//   in JSON Schema 2020-12 unless a validator opts in), $schema, $id, $comment, ...
// Keywords that change what is valid and are not supported (uniqueItems, minProperties and
// maxProperties elsewhere, patternProperties, not, if/then/else, prefixItems, ...) are an
// error naming the keyword and where it is; so is a regex construct outside the subset
// (backreferences, lookaround: named), a pattern or bounds whose automaton is too large, and
// a schema that is not valid JSON Schema. Keywords JSON Schema does not define are ignored,
// as validators ignore them.
//
// `strict` is OpenAI's structured-output mode: every property is required and no extra
// property is allowed, whatever the schema says.
#pragma once

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "grammar/builder.h"

namespace infercept::grammar {

struct SchemaOptions {
  bool strict = false;
  int32_t max_ws = 16;
};

// The node of one value of `schema` in `b` (nodes added to b).
Result<int32_t> add_schema(GrammarBuilder& b, const nlohmann::json& schema, bool strict);

// A grammar of one JSON value of `schema` (response_format json_schema).
Result<Grammar> compile_json_schema(const nlohmann::json& schema, const SchemaOptions& o = {});

// A grammar of any JSON object (response_format json_object).
Grammar any_json_object_grammar(int32_t max_ws = 16);

}  // namespace infercept::grammar
