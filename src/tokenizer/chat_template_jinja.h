// A conversation rendered by the model's own Jinja template, with the variables transformers'
// apply_chat_template passes: `messages` (OpenAI-shaped dicts; an assistant's tool_calls as
// [{"type": "function", "id", "function": {"name", "arguments": <the parsed JSON>}}], a tool
// result's tool_call_id and name), `tools` (OpenAI's [{"type": "function", "function":
// {"name", "description", "parameters"}}], None when the request has none, as transformers
// passes it), `add_generation_prompt`, `bos_token`, `eos_token`. Everything that came from
// the client is a tainted string, so RenderedChat::literal covers every byte of it that
// reaches the prompt, whatever the template did with it.
#pragma once

#include <vector>

#include "core/result.h"
#include "tokenizer/chat_template.h"

namespace infercept {

// tmpl.jinja must be set. `template_vars_json`: extra variables (render_chat_spans), set
// after the renderer's own. Errors: arguments or schemas that are not JSON or nest past
// kMaxJsonDepth, extra variables that are not a JSON object or take a reserved name
// (reserved_template_variable), the template's own raise_exception, its runtime errors
// (naming the line), output past max_bytes.
Result<RenderedChat> render_jinja_chat(const ChatTemplate& tmpl,
                                       const std::vector<ChatMessage>& messages,
                                       const std::vector<ToolDefinition>& tools,
                                       bool add_generation_prompt, size_t max_bytes,
                                       const std::string& template_vars_json = "");

// Whether a conversation involves tools: tools declared, an assistant's tool calls, or a
// tool result.
bool conversation_uses_tools(const std::vector<ChatMessage>& messages,
                             const std::vector<ToolDefinition>& tools);

}  // namespace infercept
