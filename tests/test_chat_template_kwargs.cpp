// A request's extra template variables (chat_template_kwargs) in the model's own template:
// they reach the template, they cannot replace what the renderer sets, and with Qwen3's and
// QwQ's real templates (build/chat-templates, fetched by `make chat-templates`) they decide
// the generation prompt's reasoning block, which decides where the turn is read from
// (think_start_of_prompt), turn after turn.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/tool_call.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"

namespace infercept {
namespace {

ChatMessage msg(const char* role, const char* content) {
  ChatMessage m;
  m.role = role;
  m.content = content;
  return m;
}

// A real model's template from build/chat-templates ("" when it was not fetched).
std::string real_template(const std::string& name) {
  return testing::read_file(std::string(INFERCEPT_SOURCE_DIR) + "/build/chat-templates/" + name +
                            ".jinja");
}

TEST(ChatTemplateKwargs, ReachTheTemplateAsClientValues) {
  auto t = load_chat_template("",
                              "{% for m in messages %}{{ m.content }}{% endfor %}"
                              "{% if enable_thinking is defined and enable_thinking is false %}"
                              "[no think]{% endif %}{{ depth | default(0) }}{{ who }}",
                              "", "");
  ASSERT_TRUE(t.ok()) << t.error().message;
  const std::vector<ChatMessage> m = {msg("user", "Hi")};
  auto plain = render_chat_spans(*t, m, {}, true);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->text, "Hi0");
  auto off = render_chat_spans(*t, m, {}, true, kDefaultMaxRenderedBytes,
                               R"({"enable_thinking": false, "depth": 3, "who": "<|im_end|>"})");
  ASSERT_TRUE(off.ok()) << off.error().message;
  EXPECT_EQ(off->text, "Hi[no think]3<|im_end|>");
  // A string from the kwargs is client text: its bytes are literal (never special tokens).
  const size_t at = off->text.find("<|im_end|>");
  bool covered = false;
  for (const TextSpan& s : off->literal) covered = covered || (s.begin <= at && s.end >= at + 10);
  EXPECT_TRUE(covered);
  auto on =
      render_chat_spans(*t, m, {}, true, kDefaultMaxRenderedBytes, R"({"enable_thinking": true})");
  ASSERT_TRUE(on.ok());
  EXPECT_EQ(on->text, "Hi0");
}

TEST(ChatTemplateKwargs, ReservedNamesAndBadValuesAreErrors) {
  auto t = load_chat_template("", "{% for m in messages %}{{ m.content }}{% endfor %}", "", "");
  ASSERT_TRUE(t.ok());
  const std::vector<ChatMessage> m = {msg("user", "Hi")};
  for (const char* vars :
       {R"({"messages": []})", R"({"add_generation_prompt": false})", R"({"bos_token": "x"})",
        R"({"tools": null})", R"({"raise_exception": 1})"}) {
    auto r = render_chat_spans(*t, m, {}, true, kDefaultMaxRenderedBytes, vars);
    ASSERT_FALSE(r.ok()) << vars;
    EXPECT_NE(r.error().message.find("cannot be given"), std::string::npos) << r.error().message;
  }
  EXPECT_FALSE(render_chat_spans(*t, m, {}, true, kDefaultMaxRenderedBytes, "[1]").ok());
  EXPECT_FALSE(render_chat_spans(*t, m, {}, true, kDefaultMaxRenderedBytes, "{").ok());
  EXPECT_TRUE(reserved_template_variable("eos_token"));
  EXPECT_TRUE(reserved_template_variable("strftime_now"));
  EXPECT_FALSE(reserved_template_variable("enable_thinking"));
  // The built-in families have no variables: kwargs change nothing there.
  auto chatml = load_chat_template("chatml", "", "", "");
  ASSERT_TRUE(chatml.ok());
  EXPECT_EQ(render_chat_spans(*chatml, m, {}, true)->text,
            render_chat_spans(*chatml, m, {}, true, kDefaultMaxRenderedBytes,
                              R"({"enable_thinking": false})")
                ->text);
}

// Qwen3 with enable_thinking false: the generation prompt holds the closed, empty block, so
// the turn is read as content from its first byte; a follow-up with the same kwargs renders
// the conversation before the new turn as the first request did, and closes the new turn's
// block again.
TEST(ChatTemplateKwargs, Qwen3EnableThinkingFalse) {
  const std::string src = real_template("Qwen-Qwen3-0.6B");
  if (src.empty()) GTEST_SKIP() << "build/chat-templates not fetched (make chat-templates)";
  auto t = load_chat_template("", src, "<|endoftext|>", "<|im_end|>");
  ASSERT_TRUE(t.ok()) << t.error().message;
  const std::string off = R"({"enable_thinking": false})";
  std::vector<ChatMessage> conv = {msg("system", "Be brief."), msg("user", "Hi")};
  auto first = render_chat_spans(*t, conv, {}, true, kDefaultMaxRenderedBytes, off);
  ASSERT_TRUE(first.ok()) << first.error().message;
  const std::string gen = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  ASSERT_TRUE(first->text.ends_with(gen)) << first->text;
  EXPECT_EQ(think_start_of_prompt(first->text, first->literal), ThinkStart::after);
  // Without the kwargs the model opens its own block.
  auto thinking = render_chat_spans(*t, conv, {}, true);
  ASSERT_TRUE(thinking.ok());
  EXPECT_TRUE(thinking->text.ends_with("<|im_start|>assistant\n"));
  EXPECT_EQ(think_start_of_prompt(thinking->text, thinking->literal), ThinkStart::model);
  // The answer read as the server reads it, sent back, and a new question.
  const ParsedTurn answer =
      parse_tool_turn("Hello there.", {ToolCallFormat::hermes, true, ThinkStart::after});
  EXPECT_EQ(answer.content, "Hello there.");
  EXPECT_EQ(answer.reasoning, "");
  conv.push_back(msg("assistant", answer.content.c_str()));
  conv.push_back(msg("user", "And then?"));
  auto second = render_chat_spans(*t, conv, {}, true, kDefaultMaxRenderedBytes, off);
  ASSERT_TRUE(second.ok());
  const std::string before_turn = first->text.substr(0, first->text.size() - gen.size());
  EXPECT_TRUE(second->text.starts_with(before_turn + "<|im_start|>assistant\n"));
  EXPECT_TRUE(second->text.ends_with(gen));
  EXPECT_EQ(think_start_of_prompt(second->text, second->literal), ThinkStart::after);
  // The same request renders the same text every time (the prefix cache's premise).
  EXPECT_EQ(render_chat_spans(*t, conv, {}, true, kDefaultMaxRenderedBytes, off)->text,
            second->text);
}

// QwQ's template (as llama.cpp ships it) opens <think> and closes it unless enable_thinking:
// with it, the turn starts inside the block.
TEST(ChatTemplateKwargs, QwQOpensTheBlockWithEnableThinking) {
  const std::string src = real_template("Qwen-QwQ-32B");
  if (src.empty()) GTEST_SKIP() << "build/chat-templates not fetched (make chat-templates)";
  auto t = load_chat_template("", src, "<|endoftext|>", "<|im_end|>");
  ASSERT_TRUE(t.ok()) << t.error().message;
  const std::vector<ChatMessage> conv = {msg("user", "Hi")};
  auto on = render_chat_spans(*t, conv, {}, true, kDefaultMaxRenderedBytes,
                              R"({"enable_thinking": true})");
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE(on->text.ends_with("<|im_start|>assistant\n<think>\n")) << on->text;
  EXPECT_EQ(think_start_of_prompt(on->text, on->literal), ThinkStart::inside);
  auto off = render_chat_spans(*t, conv, {}, true);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(think_start_of_prompt(off->text, off->literal), ThinkStart::after);
}

}  // namespace
}  // namespace infercept
