// Grammars of a model's tool calls: one or more calls, each naming a declared tool, its
// arguments that tool's JSON Schema, written in the model's format (ToolCallSyntax: the
// text around a call and the key of its arguments; a new format is a new syntax value).
//
//   Hermes:    <tool_call>\n{"name": "get_weather", "arguments": {...}}\n</tool_call>
//   JSON turn: {"name": "get_weather", "parameters": {...}}   (Llama 3.1; one per line)
//   Mistral:   [TOOL_CALLS][{"name": "get_weather", "arguments": {...}}, ...]   (v0.3, Nemo)
//              [TOOL_CALLS]get_weather[ARGS]{...}   (later tokenizers; one marker per call)
//
// White space is bounded (Grammar::max_ws) around the calls and inside the JSON.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "grammar/grammar.h"

namespace infercept::grammar {

struct ToolCallSyntax {
  // How the calls are laid out after `open`:
  //   object: each call is open, {name_key: ..., arguments_key: ...}, close
  //   list:   open once, then one JSON array of those objects, then close
  //   name_args: each call is open, the bare name, args_marker, the arguments object
  enum class Shape { object, list, name_args };
  Shape shape = Shape::object;
  std::string open;   // before a call's JSON ("" = none)
  std::string close;  // after it
  std::string name_key = "name";
  std::string arguments_key = "arguments";
  std::string args_marker;  // name_args: between the name and the arguments
};
ToolCallSyntax hermes_syntax();        // <tool_call> ... </tool_call>, "arguments"
ToolCallSyntax json_turn_syntax();     // bare JSON objects, "parameters"
ToolCallSyntax mistral_list_syntax();  // [TOOL_CALLS][{...}, ...], "arguments"
ToolCallSyntax mistral_args_syntax();  // [TOOL_CALLS]name[ARGS]{...}

struct ToolSpec {
  std::string name;
  const nlohmann::json* parameters = nullptr;  // the JSON Schema; null = any object
  bool strict = false;                         // OpenAI's strict: all required, closed
};

struct ToolGrammarError {
  size_t tool = 0;  // the index of the tool whose schema failed
  std::string message;
};

// One or more calls (up to max_calls, -1 = any number: parallel calls in one turn), each of
// one of `tools`. On an error, the tool it comes from.
std::variant<Grammar, ToolGrammarError> tool_call_grammar(std::span<const ToolSpec> tools,
                                                          const ToolCallSyntax& syntax,
                                                          int32_t max_ws = 16,
                                                          int64_t max_calls = -1);

}  // namespace infercept::grammar
