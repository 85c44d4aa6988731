// The one parser of a model's tool calls, used by the engine (to pause a request at a call)
// and by the server (to report a turn as OpenAI `tool_calls`), so both read a turn the same
// way. The formats, chosen by the chat template (tool_call_stream.h has the details):
//   Hermes (Qwen2.5, Qwen3, SmolLM2): <tool_call>{"name": ..., "arguments": {...}}</tool_call>
//   JSON turn (Llama 3.1/3.2, Llama 2): the whole turn is {"name": ..., "parameters": {...}},
//   possibly after <|python_tag|>, several separated by ';' or new lines.
//   Mistral: [TOOL_CALLS][{"name": ..., "arguments": {...}}] or [TOOL_CALLS]name[ARGS]{...}.
// A reasoning model's <think>...</think> at the start of a turn is reasoning (Qwen3).
//
// The rule for a malformed call: it is text. A <tool_call> block whose body is not a JSON
// object with a non-empty string "name" is not a call: it does not pause the request and it
// comes back in the content, verbatim; the blocks around it are judged on their own. A JSON
// turn is calls only if every part of it is one; otherwise the whole turn is content.
//
// The whole-turn functions here are the streaming reader (ToolCallStream) fed a whole turn.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/text_span.h"

namespace infercept {

struct ParsedToolCall {
  std::string name;
  // The arguments as JSON text: an object exactly as the model wrote it ("{}" when absent);
  // a string the model wrote as the arguments is taken as that text.
  std::string arguments_json;
};

enum class ToolCallFormat { hermes, json_turn, mistral };

// Where a turn starts relative to a reasoning block: the template's generation prompt may
// open one (DeepSeek-R1 distills and QwQ end the prompt with "<think>\n") or write a closed,
// empty one (Qwen3 with enable_thinking false: "<think>\n\n</think>\n\n"), and then the
// model never writes the <think> itself.
enum class ThinkStart {
  model,   // the model may open <think> itself (where TurnFormat::reasoning)
  inside,  // the prompt opened <think>: the turn is reasoning up to </think>
  after,   // the prompt closed its block: the turn has no reasoning block
};

// How a model's turn is read: its tool-call format, whether it opens with a
// <think>...</think> block of reasoning, and where the prompt left it (think_start_of_prompt).
struct TurnFormat {
  ToolCallFormat calls = ToolCallFormat::hermes;
  bool reasoning = false;
  ThinkStart think = ThinkStart::model;
};

// Read from the rendered prompt's tail (white space aside): it ends with the template's own
// "<think>" -> inside, with its "</think>" -> after, otherwise model. A marker in `literal`
// (client text: a message that ends the prompt) does not count.
ThinkStart think_start_of_prompt(std::string_view prompt, std::span<const TextSpan> literal = {});

// The format a built-in chat template teaches its model.
ToolCallFormat tool_call_format(ChatTemplateKind kind);
// The format a model's own (Jinja) template teaches: [TOOL_CALLS] -> mistral, <tool_call> ->
// hermes, <|python_tag|> or a "parameters" key -> json_turn; `fallback` when it shows none.
ToolCallFormat tool_call_format_from_template_text(
    const std::string& text, ToolCallFormat fallback = ToolCallFormat::hermes);
// The template writes or strips <think> blocks (Qwen3, QwQ, DeepSeek-R1 distills).
bool template_has_reasoning(const std::string& text);
// How a model's turns are read: a template named on the command line (`template_name`) sets
// the format by its family; otherwise the model's own template text, where it shows one,
// and the family detected from it where not.
TurnFormat turn_format(const ChatTemplate& tmpl, const std::string& template_name,
                       const std::string& model_template_text);
// The texts of the tokens that mark calls (and reasoning) in `format`. Where a vocabulary has
// them as control tokens ([TOOL_CALLS], <|python_tag|>), the detokenizer must render them for
// the calls to be read.
std::vector<std::string> turn_markers(TurnFormat format);

struct ParsedTurn {
  std::string content;                // the text outside the calls (right-trimmed; "" if blank)
  std::string reasoning;              // the <think> block's text (TurnFormat::reasoning)
  std::vector<ParsedToolCall> calls;  // in the order written
};

// A whole assistant turn (its end reached): the calls in it and the text around them. A
// Hermes block may lack its closing tag when the turn ends right after its JSON. With no
// calls, `content` is the text unchanged (less a reasoning block).
// `calls` off: no calls are read (reasoning only).
ParsedTurn parse_tool_turn(const std::string& text, TurnFormat format, bool calls = true);
inline ParsedTurn parse_tool_turn(const std::string& text, ToolCallFormat format) {
  return parse_tool_turn(text, TurnFormat{format, false});
}

// While a turn is generated: its first call that is complete before the turn ends (Hermes:
// a <tool_call> block closed; the other formats' calls are complete only at the turn's end).
std::optional<ParsedToolCall> find_tool_call(const std::string& text, TurnFormat format);

// {"name": ..., <arguments>} as a call, or nothing when it is not one (not JSON, not an
// object, no non-empty string "name", nested past kMaxJsonDepth). The arguments are under
// "arguments" or "parameters", whichever comes first; a string is taken as the text, null or
// absent is "{}", anything else is written compactly in the model's key order.
std::optional<ParsedToolCall> tool_call_from_json(std::string_view body);

}  // namespace infercept
