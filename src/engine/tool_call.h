// The one parser of a model's tool calls, used by the engine (to pause a request at a call)
// and by the server (to report a turn as OpenAI `tool_calls`), so both read a turn the same
// way. Two formats, chosen by the chat template:
//   Hermes/ChatML (Qwen, SmolLM2): <tool_call>{"name": ..., "arguments": {...}}</tool_call>
//   JSON turn (Llama 3.1, Llama 2): the whole turn is {"name": ..., "parameters": {...}},
//   possibly after <|python_tag|>, or several such objects one per line.
//
// The rule for a malformed call: it is text. A <tool_call> block whose body is not a JSON
// object with a non-empty string "name" is not a call: it does not pause the request and it
// comes back in the content, verbatim; the blocks around it are judged on their own. A JSON
// turn is calls only if every line of it is one; otherwise the whole turn is content.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"

namespace infercept {

struct ParsedToolCall {
  std::string name;
  // The arguments as JSON text: an object in the model's key order ("{}" when absent); a
  // string the model wrote as the arguments is taken as that text.
  std::string arguments_json;
};

enum class ToolCallFormat { hermes, json_turn };

// The format a chat template teaches its model.
ToolCallFormat tool_call_format(ChatTemplateKind kind);
// The format of a loaded template: a Jinja template's is read from its text when it reads
// `tools` ("<tool_call>": Hermes; "<|python_tag|>" or a "parameters" object: Llama 3.1
// JSON; "[TOOL_CALLS]": Mistral, parsed as a JSON turn for now), otherwise its built-in
// family's (load_chat_template sets ChatTemplate::kind to match).
ToolCallFormat tool_call_format_of(const ChatTemplate& t);

struct ParsedTurn {
  std::string content;                // the text outside the calls (right-trimmed; "" if blank)
  std::vector<ParsedToolCall> calls;  // in the order written
};

// A whole assistant turn (its end reached): the calls in it and the text around them. A
// Hermes block may lack its closing tag when the turn ends right after its JSON. With no
// calls, `content` is the text unchanged.
ParsedTurn parse_tool_turn(const std::string& text, ToolCallFormat format);

// While a turn is generated: the first complete <tool_call>...</tool_call> block in `text`
// that is a call (malformed blocks are skipped: they are text).
std::optional<ParsedToolCall> find_hermes_tool_call(const std::string& text);

// `text` (a whole assistant turn) in the JSON-turn format: its first call, if the turn is
// calls (parse_tool_turn(text, ToolCallFormat::json_turn).calls.front()).
std::optional<ParsedToolCall> parse_json_tool_call(const std::string& text);

}  // namespace infercept
