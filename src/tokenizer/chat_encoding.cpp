#include "tokenizer/chat_encoding.h"

#include <span>

#include "tokenizer/chat_template_jinja.h"

namespace infercept {

Result<std::vector<int32_t>> encode_chat(const Tokenizer& tok, const ChatTemplate& tmpl,
                                         const std::vector<ChatMessage>& messages,
                                         const std::vector<ToolDefinition>& tools,
                                         const ChatEncodeOptions& options) {
  TRY_ASSIGN(RenderedChat r, render_chat_spans(tmpl, messages, tools, options.add_generation_prompt,
                                               options.max_rendered_bytes));
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

}  // namespace infercept
