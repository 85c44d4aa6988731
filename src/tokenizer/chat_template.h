// Chat templates: renders a conversation (with tool definitions, assistant tool calls and
// tool results) into the prompt text a model was trained on. The model's own Jinja template
// renders by default (tokenizer/jinja: jinja2's semantics, as transformers'
// apply_chat_template); three families are also implemented natively (ChatML, Llama 3,
// Llama 2), for files without a template, for --chat-template NAME, and for tool requests to
// a template that has no tool format (ChatTemplate::jinja_reads_tools).
//
// What a client sends is text, never structure: the rendered prompt comes with the byte spans
// that came from the client (RenderedChat::literal), and the tokenizer matches special tokens
// only outside them (chat_encoding.h). JSON from the client (tool schemas, tool-call
// arguments) is refused past kMaxJsonDepth before it is parsed, and the output has a byte
// budget, so no input makes the renderer recurse deeply or allocate past that budget (the
// llama3 template indents tool schemas, which grows with the square of their depth).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "tokenizer/text_span.h"

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
  // Assistant only: a reasoning model's <think> text (OpenAI-style "reasoning_content"), for
  // templates that render it (Qwen3 keeps it in the turns after the last user message).
  std::string reasoning_content;
};

struct ToolDefinition {
  std::string name;
  std::string description;
  std::string parameters_json;  // JSON Schema text
  bool strict = false;          // OpenAI's strict: calls hold to the schema, all required
};

enum class ChatTemplateKind { chatml, llama3, llama2 };

namespace jinja {
class Template;
}

struct ChatTemplate {
  // The built-in family: it renders when there is no Jinja template (and where the rule
  // below says), and it names the tool-call format the server parses and forces.
  ChatTemplateKind kind = ChatTemplateKind::chatml;
  // ChatML only: the system message used when the conversation has none ("" = none).
  std::string default_system;

  // The model's own Jinja template (null: the built-in family renders everything).
  std::shared_ptr<const jinja::Template> jinja;
  std::string jinja_source;
  // Whether the Jinja template reads `tools`. One that does not teaches the model no tool
  // format: a request whose conversation involves tools (tools declared, assistant tool
  // calls, tool results) is rendered by the built-in family instead, so tools keep working
  // (docs/DESIGN.md, "Chat templates"). Such requests are an error when no family matched
  // the template's framing (has_family false).
  bool jinja_reads_tools = false;
  bool has_family = true;
  // The template's bos_token and eos_token (the tokenizer's BOS and EOS pieces).
  std::string bos_token, eos_token;
};

// Picks the family from a template name ("chatml", "llama3", "llama2") or, when name is
// empty, from the model's own template text. Error when neither identifies one.
Result<ChatTemplate> resolve_chat_template(const std::string& name,
                                           const std::string& model_template_text);

// The template the server renders with: a built-in family when `name` is given; otherwise
// the Jinja template `jinja_source` (the model file's, or --chat-template-file's), with the
// built-in family its framing matches as the fallback for tool requests. Errors: an unknown
// name, no template at all, a Jinja template the interpreter cannot parse or that uses what
// it lacks (the message names the construct and line), or one that fails on a one-message
// conversation.
Result<ChatTemplate> load_chat_template(const std::string& name, const std::string& jinja_source,
                                        const std::string& bos_token, const std::string& eos_token);

// The budget render_chat uses when given none: far above any real prompt (a 128k-token
// context is under 1 MB of text), far below what would strain the host.
inline constexpr size_t kDefaultMaxRenderedBytes = size_t{64} << 20;

// A rendered prompt: the text, and the byte ranges of it that came from the client (message
// contents, tool names, tool-call arguments, tool definitions), in order, not overlapping.
struct RenderedChat {
  std::string text;
  std::vector<TextSpan> literal;
};

// Whether `name` is a variable the renderer sets itself (messages, tools, documents,
// add_generation_prompt, bos_token, eos_token) or a global function of the templates
// (raise_exception, strftime_now, range, namespace, dict): a request's extra template
// variables (chat_template_kwargs) may not take these names.
bool reserved_template_variable(const std::string& name);

// Renders messages (and tools, if any) and, when add_generation_prompt, the opening of the
// assistant's turn. `template_vars_json`, when not empty, is a JSON object whose members are
// extra variables of the model's Jinja template (a chat request's chat_template_kwargs, e.g.
// Qwen3's {"enable_thinking": false}; client values, so tainted); the built-in families have
// no variables and ignore it. Errors: an unknown role, a template's structural rule broken, a
// tool schema or tool-call arguments nested deeper than kMaxJsonDepth, a schema that is not
// JSON, template variables that are not a JSON object or take a reserved name, or output past
// max_bytes (the rendering stops there).
Result<RenderedChat> render_chat_spans(const ChatTemplate& tmpl,
                                       const std::vector<ChatMessage>& messages,
                                       const std::vector<ToolDefinition>& tools,
                                       bool add_generation_prompt,
                                       size_t max_bytes = kDefaultMaxRenderedBytes,
                                       const std::string& template_vars_json = "");

// The text of render_chat_spans alone.
Result<std::string> render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                                const std::vector<ToolDefinition>& tools,
                                bool add_generation_prompt,
                                size_t max_bytes = kDefaultMaxRenderedBytes);

}  // namespace infercept
