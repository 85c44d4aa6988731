#include "tokenizer/chat_encoding.h"

#include <span>

#include "tokenizer/chat_template_jinja.h"

namespace infercept {

Result<RenderedChat> render_chat_for_encoding(const ChatTemplate& tmpl,
                                              const std::vector<ChatMessage>& messages,
                                              const std::vector<ToolDefinition>& tools,
                                              const ChatEncodeOptions& options) {
  return render_chat_spans(tmpl, messages, tools, options.add_generation_prompt,
                           options.max_rendered_bytes, options.template_vars_json);
}

std::vector<int32_t> encode_rendered_chat(const Tokenizer& tok, const ChatTemplate& tmpl,
                                          const std::vector<ChatMessage>& messages,
                                          const std::vector<ToolDefinition>& tools, RenderedChat r,
                                          const ChatEncodeOptions& options) {
  r.text += options.suffix;
  const std::span<const TextSpan> literal =
      options.allow_special_in_content ? std::span<const TextSpan>() : r.literal;
  // A Jinja template writes bos_token itself where its model wants one (transformers
  // tokenizes its output without adding special tokens); the built-in families rely on the
  // vocabulary's add_bos.
  const bool jinja_rendered =
      tmpl.jinja && (tmpl.jinja_reads_tools || !conversation_uses_tools(messages, tools));
  return tok.encode(r.text, /*add_bos=*/!jinja_rendered, /*parse_special=*/true, literal);
}

Result<std::vector<int32_t>> encode_chat(const Tokenizer& tok, const ChatTemplate& tmpl,
                                         const std::vector<ChatMessage>& messages,
                                         const std::vector<ToolDefinition>& tools,
                                         const ChatEncodeOptions& options) {
  TRY_ASSIGN(RenderedChat r, render_chat_for_encoding(tmpl, messages, tools, options));
  return encode_rendered_chat(tok, tmpl, messages, tools, std::move(r), options);
}

}  // namespace infercept
