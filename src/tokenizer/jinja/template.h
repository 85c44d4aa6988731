// A Jinja chat template, parsed once and rendered per request, with the semantics of
// jinja2 in the environment transformers' apply_chat_template uses
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its tojson,
// raise_exception and strftime_now, {% generation %}); see docs/DESIGN.md, "Chat templates".
//
// Loading checks every filter, test, method and global function the template names, so a
// template that needs what the interpreter lacks fails when the model loads, naming it and
// its line. Rendering is bounded: output bytes, evaluation steps and macro call depth, so no
// input makes it run long or deep; errors name the template line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "core/result.h"
#include "tokenizer/jinja/value.h"

namespace infercept::jinja {

struct Stmt;

struct RenderOptions {
  size_t max_bytes = size_t{64} << 20;  // the output, and any one string made on the way
  int64_t max_steps = 20'000'000;       // statements, expressions and loop iterations
  int max_call_depth = 64;              // macro calls within macro calls
};

class Template {
 public:
  static Result<Template> parse(const std::string& source);

  // Renders with `context` as the template's variables. The result's taint is the bytes
  // that came from tainted strings of the context.
  Result<Str> render(const DictData& context, const RenderOptions& options = {}) const;

  // Whether the template reads the variable `name` anywhere.
  bool uses_name(std::string_view name) const { return names_.count(std::string(name)) > 0; }

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
  std::set<std::string> names_;
};

}  // namespace infercept::jinja
