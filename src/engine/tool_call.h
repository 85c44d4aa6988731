// Recognizing a model's tool call in generated text, so the engine can pause the request
// there (and, later, the server can report it as OpenAI `tool_calls`).
//   Hermes/ChatML (Qwen, SmolLM2): <tool_call>{"name": ..., "arguments": {...}}</tool_call>
//   Llama 3.1: the whole turn is a JSON object {"name": ..., "parameters": {...}}, possibly
//   after <|python_tag|>, closed by an end-of-turn token.
#pragma once

#include <optional>
#include <string>

namespace infercept {

struct ParsedToolCall {
  std::string name;
  std::string arguments_json;  // the arguments/parameters object as JSON text ("{}" if none)
};

// The first complete <tool_call>...</tool_call> in `text`, if any. A body that is not JSON
// with a string "name" still counts as a call (name "tool"): the model asked for a tool, and
// the client decides what to do with a malformed request.
std::optional<ParsedToolCall> find_hermes_tool_call(const std::string& text);

// `text` (a whole assistant turn) as a Llama 3.1 JSON tool call, if it is one.
std::optional<ParsedToolCall> parse_json_tool_call(const std::string& text);

}  // namespace infercept
