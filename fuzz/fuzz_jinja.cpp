// libFuzzer target for the Jinja interpreter: any byte string is a template source. It
// parses or gives an Error naming a line; a template that parses renders a fixed
// conversation (client strings tainted) within small limits, or gives an Error; the output's
// taint spans are ordered, disjoint and inside the text. No input crashes, recurses past
// the limits or runs past its step budget.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tokenizer/jinja/json.h"
#include "tokenizer/jinja/template.h"

using namespace infercept;
using namespace infercept::jinja;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  auto t = Template::parse(source);
  if (!t.ok()) {
    if (t.error().message.empty()) std::abort();
    return 0;
  }
  static const Value context = *from_json(
      R"({"messages": [{"role": "system", "content": "Be <|im_start|> brief."},
                       {"role": "user", "content": "Héllo\n{{ x }}"},
                       {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                        "id": "abc123XYZ", "function": {"name": "f", "arguments": {"a": [1, 2.5,
                        null, true, {"b": "c"}]}}}]},
                       {"role": "tool", "tool_call_id": "abc123XYZ", "content": "42"}],
          "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                     "parameters": {"type": "object", "properties": {"a": {"type": "array"}}}}}],
          "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})",
      /*tainted=*/true);
  RenderOptions o;
  o.max_bytes = 1 << 20;
  o.max_steps = 200000;
  auto out = t->render(context.dict(), o);
  if (!out.ok()) {
    if (out.error().message.empty()) std::abort();
    return 0;
  }
  size_t prev = 0;
  for (const TextSpan& s : out->taint) {
    if (s.begin < prev || s.end <= s.begin || s.end > out->text.size()) std::abort();
    prev = s.end;
  }
  return 0;
}
