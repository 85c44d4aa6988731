// The model's tool calls, in the format its chat template taught it, turned into OpenAI
// tool_calls: Hermes <tool_call>{"name", "arguments"}</tool_call> blocks (ChatML models:
// Qwen, SmolLM2) or a Llama 3.1 JSON turn {"name", "parameters"}, read by the engine's
// parser (engine/tool_call.h), so a turn the engine paused at is the turn reported here as
// calls, and a malformed call is text to both. Also the text a
// generation is made to start with when the client requires a tool call, and a streaming
// filter that lets a turn's text through but holds back what may be a tool call.
#pragma once

#include <string>
#include <vector>

#include "server/openai_protocol.h"
#include "tokenizer/chat_template.h"

namespace infercept::server {

struct AssistantTurn {
  std::string content;          // the text outside the calls
  std::vector<ToolCall> calls;  // ids assigned ("call_...")
};

// Splits a whole assistant turn into content and tool calls (parse_tool_turn), ids assigned.
// A call whose body is not JSON with a non-empty string "name" is not a call: its text stays
// in the content.
AssistantTurn parse_assistant_turn(const std::string& text, ChatTemplateKind kind);

// What the generation is made to start with for tool_choice "required" (a call of some
// tool) or "named" (a call of that tool); "" otherwise.
std::string forced_tool_prefix(ChatTemplateKind kind, ToolChoice choice, const std::string& name);

// Streaming: push the turn's text as it comes; what it returns is content that can be sent
// now. Text that may be (the start of) a tool call, and trailing white space, is held back
// until the turn ends; then parse_assistant_turn on the whole text says what it was.
class ToolTextFilter {
 public:
  ToolTextFilter(ChatTemplateKind kind, bool active) : kind_(kind), active_(active) {}
  std::string push(const std::string& delta);
  size_t emitted() const { return emitted_; }  // bytes of the turn sent as content so far

 private:
  ChatTemplateKind kind_;
  bool active_;
  bool holding_ = false;  // a call has started: nothing more goes out before the end
  std::string text_;
  size_t emitted_ = 0;
};

}  // namespace infercept::server
