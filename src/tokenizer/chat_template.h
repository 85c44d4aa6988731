// Chat templates: renders a conversation (with tool definitions, assistant tool calls and
// tool results) into the prompt text a model was trained on. The families in use are
// implemented natively rather than through a Jinja interpreter; the family is detected from
// the model's template text, or named with --chat-template. An unknown template is an error.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"

namespace infercept {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments_json;  // JSON object text
};

struct ChatMessage {
  std::string role;  // system | user | assistant | tool
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only
  std::string name;                  // tool only: the tool's name (optional)
};

struct ToolDefinition {
  std::string name;
  std::string description;
  std::string parameters_json;  // JSON Schema text
};

enum class ChatTemplateKind { chatml, llama3, llama2 };

struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::chatml;
  // ChatML only: the system message used when the conversation has none ("" = none).
  std::string default_system;
};

// Picks the family from a template name ("chatml", "llama3", "llama2") or, when name is
// empty, from the model's own template text. Error when neither identifies one.
Result<ChatTemplate> resolve_chat_template(const std::string& name,
                                           const std::string& model_template_text);

// Renders messages (and tools, if any) and, when add_generation_prompt, the opening of the
// assistant's turn.
Result<std::string> render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                                const std::vector<ToolDefinition>& tools,
                                bool add_generation_prompt);

}  // namespace infercept
