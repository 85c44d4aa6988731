// Grammars of a model's tool calls: one or more calls, each naming a declared tool, its
// arguments that tool's JSON Schema, written in the model's format (ToolCallSyntax: the
// text around a call and the key of its arguments; a new format is a new syntax value).
//
//   Hermes:    <tool_call>\n{"name": "get_weather", "arguments": {...}}\n</tool_call>
//   JSON turn: {"name": "get_weather", "parameters": {...}}   (Llama 3.1; one per line)
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
  std::string open;   // before a call's JSON ("" = none)
  std::string close;  // after it
  std::string name_key = "name";
  std::string arguments_key = "arguments";
};
ToolCallSyntax hermes_syntax();     // <tool_call> ... </tool_call>, "arguments"
ToolCallSyntax json_turn_syntax();  // bare JSON objects, "parameters"

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
