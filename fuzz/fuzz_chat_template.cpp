// libFuzzer target for the chat templates: any byte string read as a chat request body (the
// way the server gets a conversation and its tools) renders with every template family,
// with and without a generation prompt, or gives an Error; the rendered prompt encodes with
// the default model's tokenizer, special tokens parsed as the server does.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "default_tokenizer.h"
#include "server/openai_protocol.h"
#include "tokenizer/chat_template.h"

using namespace infercept;
using namespace infercept::server;

namespace {

volatile uint64_t g_sink;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = fuzz::default_tokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  json body;
  if (parse_body(text, body)) return 0;
  RequestLimits limits;
  limits.context = 2048;
  ChatRequest chat;
  if (parse_chat_request(body, limits, chat)) return 0;

  uint64_t acc = 0;
  for (const ChatTemplateKind kind :
       {ChatTemplateKind::chatml, ChatTemplateKind::llama3, ChatTemplateKind::llama2}) {
    ChatTemplate tmpl;
    tmpl.kind = kind;
    if (kind == ChatTemplateKind::chatml) tmpl.default_system = "You are a helpful assistant.";
    for (const bool generation_prompt : {true, false}) {
      auto prompt = render_chat(tmpl, chat.messages, chat.tools, generation_prompt);
      if (!prompt.ok()) {
        if (prompt.error().message.empty()) std::abort();  // an error says what is wrong
        continue;
      }
      const auto ids = tok.encode(*prompt, /*add_bos=*/true, /*parse_special=*/true);
      for (int32_t id : ids) {
        if (id < 0 || id >= tok.vocab_size()) std::abort();
      }
      acc += prompt->size() + ids.size();
    }
  }
  g_sink = acc;
  return 0;
}
