// JSON in and out of template values. Out: the `tojson` filter as transformers defines it,
// json.dumps(value, ensure_ascii=False, indent=..., separators=..., sort_keys=...), with the
// taint of every string carried to the characters that print it. In: JSON text from the
// client (tool-call arguments, tool schemas) as values, parsed without recursion (nlohmann's
// SAX interface) after its depth was checked (kMaxJsonDepth).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "core/result.h"
#include "tokenizer/jinja/value.h"

namespace infercept::jinja {

struct JsonDumpOptions {
  int indent = -1;  // < 0: one line
  bool ensure_ascii = false;
  std::string item_sep;  // "" = Python's default (", " on one line, "," with an indent)
  std::string key_sep = ": ";
  bool sort_keys = false;
};

// json.dumps of v; an error for values JSON has no form for (Undefined, functions) and past
// max_bytes of output.
Str to_json(const Value& v, const JsonDumpOptions& options, size_t max_bytes);

// JSON text to a value (objects to dicts in their key order, a repeated key keeping its
// first place and last value, as Python's json.loads); every string, key included, tainted
// when `tainted`. Errors: not JSON, nested past kMaxJsonDepth.
Result<Value> from_json(std::string_view text, bool tainted);

}  // namespace infercept::jinja
