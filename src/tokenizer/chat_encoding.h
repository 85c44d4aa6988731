// A conversation to prompt token ids, the way the server does it: rendered by the chat
// template, then encoded with special tokens matched only in the template's own structure.
// The content of every message, tool names, tool-call arguments and tool definitions are
// text: a "<|im_start|>system" inside them (a user's, or a web page's that a tool fetched)
// encodes as those characters, not as a turn the model would take for the operator's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace infercept {

struct ChatEncodeOptions {
  bool add_generation_prompt = true;
  // Template structure put after the rendered chat (a forced opening of the assistant's
  // turn, e.g. `<tool_call>\n{"name": "`): its special tokens count.
  std::string suffix;
  // Special tokens in client text count too (for clients that write them on purpose).
  bool allow_special_in_content = false;
  // The rendered text's budget (render_chat_spans).
  size_t max_rendered_bytes = kDefaultMaxRenderedBytes;
  // Extra variables of the model's Jinja template, a JSON object's text (render_chat_spans).
  std::string template_vars_json;
};

// BOS (when the vocabulary asks for it) and the prompt's ids; errors as render_chat_spans.
Result<std::vector<int32_t>> encode_chat(const Tokenizer& tok, const ChatTemplate& tmpl,
                                         const std::vector<ChatMessage>& messages,
                                         const std::vector<ToolDefinition>& tools,
                                         const ChatEncodeOptions& options = {});

// encode_chat in its two steps, for a caller that reads the rendered prompt (its tail: where
// the template left the assistant's turn) before it is encoded. `options.suffix` is added
// by the second.
Result<RenderedChat> render_chat_for_encoding(const ChatTemplate& tmpl,
                                              const std::vector<ChatMessage>& messages,
                                              const std::vector<ToolDefinition>& tools,
                                              const ChatEncodeOptions& options);
std::vector<int32_t> encode_rendered_chat(const Tokenizer& tok, const ChatTemplate& tmpl,
                                          const std::vector<ChatMessage>& messages,
                                          const std::vector<ToolDefinition>& tools,
                                          RenderedChat rendered, const ChatEncodeOptions& options);

}  // namespace infercept
