#include "tokenizer/chat_encoding.h"

#include <span>

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
  return tok.encode(r.text, /*add_bos=*/true, /*parse_special=*/true, literal);
}

}  // namespace infercept
