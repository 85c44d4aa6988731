// Chat template tests: ChatML against the default model's own Jinja template rendered by
// jinja2 (tests/fixtures/tokenizer_smollm2.json, from scripts/make_tokenizer_fixtures.py),
// and hand-written expectations for the tool cases and the Llama families, written from the
// structure of each family's reference template (Qwen2.5 for ChatML tools, Llama 3.1,
// Llama 2 chat).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/chat_template.h"

namespace infercept {
namespace {

using json = nlohmann::json;

const char* kSmolSystem = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

std::string render(const ChatTemplate& t, const std::vector<ChatMessage>& m,
                   const std::vector<ToolDefinition>& tools = {}, bool gen = true) {
  auto r = render_chat(t, m, tools, gen);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : std::string();
}

ToolDefinition weather_tool() {
  return ToolDefinition{"get_weather", "Get the weather",
                        R"({"type":"object","properties":{"city":{"type":"string"}},)"
                        R"("required":["city"]})"};
}

std::vector<ChatMessage> tool_conversation() {
  ChatMessage user{"user", "What's the weather in Paris?", {}, "", ""};
  ChatMessage call{
      "assistant", "", {ToolCall{"call_1", "get_weather", R"({"city":"Paris"})"}}, "", ""};
  ChatMessage result{"tool", R"({"temp": 21})", {}, "call_1", "get_weather"};
  return {user, call, result};
}

TEST(ChatTemplate, ResolvesFamilies) {
  const json fx = json::parse(testing::read_file(testing::fixture_path("tokenizer_smollm2.json")));
  auto smol = resolve_chat_template("", fx["chat_template"].get<std::string>());
  ASSERT_TRUE(smol.ok()) << smol.error().message;
  EXPECT_EQ(smol->kind, ChatTemplateKind::chatml);
  EXPECT_EQ(smol->default_system, kSmolSystem);
  // A ChatML template whose system text is not a literal has no default system.
  auto plain = resolve_chat_template(
      "", "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n'}}{% endfor %}");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->default_system, "");
  auto l3 = resolve_chat_template("", "{{ '<|start_header_id|>' + role }}");
  ASSERT_TRUE(l3.ok());
  EXPECT_EQ(l3->kind, ChatTemplateKind::llama3);
  auto l2 = resolve_chat_template("", "{{ bos_token + '[INST] ' + content }}");
  ASSERT_TRUE(l2.ok());
  EXPECT_EQ(l2->kind, ChatTemplateKind::llama2);
  auto named = resolve_chat_template("llama3", "anything");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->kind, ChatTemplateKind::llama3);
  auto unknown = resolve_chat_template("", "{{ messages }}");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("--chat-template chatml|llama3|llama2"),
            std::string::npos);
  auto bad_name = resolve_chat_template("vicuna", "");
  ASSERT_FALSE(bad_name.ok());
  EXPECT_NE(bad_name.error().message.find("vicuna"), std::string::npos);
  EXPECT_FALSE(resolve_chat_template("", "").ok());
}

TEST(ChatTemplate, ChatmlMatchesModelJinja) {
  const json fx = json::parse(testing::read_file(testing::fixture_path("tokenizer_smollm2.json")));
  auto t = resolve_chat_template("", fx["chat_template"].get<std::string>());
  ASSERT_TRUE(t.ok());
  size_t n = 0;
  for (const json& c : fx["chat_cases"]) {
    std::vector<ChatMessage> msgs;
    for (const json& m : c["messages"]) {
      msgs.push_back(ChatMessage{m["role"], m["content"], {}, "", ""});
    }
    EXPECT_EQ(render(*t, msgs, {}, c["add_generation_prompt"].get<bool>()),
              c["rendered"].get<std::string>())
        << c.dump();
    ++n;
  }
  EXPECT_GE(n, 10u);
}

TEST(ChatTemplate, ChatmlPlainCases) {
  ChatTemplate t{ChatTemplateKind::chatml, kSmolSystem};
  EXPECT_EQ(render(t, {{"user", "Hi", {}, "", ""}}),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  ChatTemplate bare{ChatTemplateKind::chatml, ""};
  EXPECT_EQ(render(bare,
                   {{"system", "S", {}, "", ""},
                    {"user", "a", {}, "", ""},
                    {"assistant", "b", {}, "", ""},
                    {"user", "c", {}, "", ""}},
                   {}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\na<|im_end|>\n"
            "<|im_start|>assistant\nb<|im_end|>\n<|im_start|>user\nc<|im_end|>\n");
  EXPECT_EQ(render(bare, {{"user", "x", {}, "", ""}}),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, ChatmlTools) {
  ChatTemplate t{ChatTemplateKind::chatml, kSmolSystem};
  std::vector<ChatMessage> msgs = tool_conversation();
  // Two results in a row share one user turn.
  msgs.push_back(ChatMessage{"tool", "second", {}, "call_2", ""});
  const std::string expected =
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
      "\"Get the weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
      "{\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\n"
      "For each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
      "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n"
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response>\n<tool_response>\n"
      "second\n</tool_response><|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(render(t, msgs, {weather_tool()}), expected);

  // With a system message it replaces the default; content before tool calls is kept.
  std::vector<ChatMessage> m2 = {{"system", "Be brief.", {}, "", ""},
                                 {"user", "Weather?", {}, "", ""},
                                 {"assistant",
                                  "Checking.",
                                  {ToolCall{"a", "get_weather", R"({"city":"Köln"})"},
                                   ToolCall{"b", "get_weather", R"({"city":"Bonn"})"}},
                                  "",
                                  ""}};
  const std::string r2 = render(t, m2, {weather_tool()}, false);
  EXPECT_EQ(r2.rfind("<|im_start|>system\nBe brief.\n\n# Tools\n", 0), 0u) << r2;
  EXPECT_NE(r2.find("<|im_start|>assistant\nChecking.\n<tool_call>\n{\"name\": "
                    "\"get_weather\", \"arguments\": {\"city\": \"Köln\"}}\n</tool_call>\n"
                    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                    "\"Bonn\"}}\n</tool_call><|im_end|>\n"),
            std::string::npos)
      << r2;
  EXPECT_EQ(r2.find("SmolLM"), std::string::npos);
}

TEST(ChatTemplate, Llama3) {
  ChatTemplate t{ChatTemplateKind::llama3, ""};
  EXPECT_EQ(render(t, {{"user", "Hi", {}, "", ""}}),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render(t,
                   {{"system", "You are kind.", {}, "", ""},
                    {"user", " a ", {}, "", ""},
                    {"assistant", "b", {}, "", ""},
                    {"user", "c", {}, "", ""}},
                   {}, false),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are kind."
            "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\na<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nb<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nc<|eot_id|>");
  const std::string expected_tools =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n\n"
      "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
      "Given the following functions, please respond with a JSON for a function call with its "
      "proper arguments that best answers the given prompt.\n\nRespond in the format "
      "{\"name\": function name, \"parameters\": dictionary of argument name and its value}."
      "Do not use variables.\n\n"
      "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n"
      "        \"description\": \"Get the weather\",\n        \"parameters\": {\n"
      "            \"type\": \"object\",\n            \"properties\": {\n"
      "                \"city\": {\n                    \"type\": \"string\"\n"
      "                }\n            },\n            \"required\": [\n"
      "                \"city\"\n            ]\n        }\n    }\n}\n\n"
      "What's the weather in Paris?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", "
      "\"parameters\": {\"city\": \"Paris\"}}<|eot_id|>"
      "<|start_header_id|>ipython<|end_header_id|>\n\n{\"temp\": 21}<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(render(t, tool_conversation(), {weather_tool()}), expected_tools);
  // Tools with no user message to carry them are an error, not a crash.
  EXPECT_FALSE(render_chat(t, {}, {weather_tool()}, true).ok());
}

TEST(ChatTemplate, Llama2) {
  ChatTemplate t{ChatTemplateKind::llama2, ""};
  EXPECT_EQ(render(t, {{"user", "Hi", {}, "", ""}}), "<s>[INST] Hi [/INST]");
  EXPECT_EQ(render(t, {{"system", "Be kind.", {}, "", ""},
                       {"user", "Hi", {}, "", ""},
                       {"assistant", "Hello!", {}, "", ""},
                       {"user", "Bye", {}, "", ""}}),
            "<s>[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Bye "
            "[/INST]");
  const std::string with_tools = render(t, tool_conversation(), {weather_tool()});
  EXPECT_EQ(with_tools,
            "<s>[INST] <<SYS>>\nYou can call these functions. To call one, answer with only a "
            "JSON object {\"name\": function name, \"arguments\": dictionary of arguments}.\n"
            "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
            "\"Get the weather\", \"parameters\": {\"type\": \"object\", \"properties\": "
            "{\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n<</SYS>>\n\n"
            "What's the weather in Paris? [/INST] {\"name\": \"get_weather\", \"arguments\": "
            "{\"city\": \"Paris\"}} </s><s>[INST] {\"temp\": 21} [/INST]");
  auto bad = render_chat(t, {{"user", "a", {}, "", ""}, {"user", "b", {}, "", ""}}, {}, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("alternate"), std::string::npos);
}

TEST(ChatTemplate, Errors) {
  ChatTemplate t{ChatTemplateKind::chatml, ""};
  auto role = render_chat(t, {{"wizard", "x", {}, "", ""}}, {}, true);
  ASSERT_FALSE(role.ok());
  EXPECT_NE(role.error().message.find("wizard"), std::string::npos);
  ToolDefinition bad{"f", "", "{not json"};
  auto r = render_chat(t, {{"user", "x", {}, "", ""}}, {bad}, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("tool 'f'"), std::string::npos);
  // Arguments that are not JSON are passed through as a JSON string rather than dropped.
  ChatMessage call{"assistant", "", {ToolCall{"1", "f", "oops"}}, "", ""};
  const std::string s = render(t, {{"user", "x", {}, "", ""}, call});
  EXPECT_NE(s.find("\"arguments\": \"oops\""), std::string::npos) << s;
}

// The spans of client text, as substrings of the rendered prompt.
std::vector<std::string> literal_texts(const RenderedChat& r) {
  std::vector<std::string> out;
  size_t prev_end = 0;
  for (const TextSpan& sp : r.literal) {
    EXPECT_LT(sp.begin, sp.end);
    EXPECT_LE(sp.end, r.text.size());
    EXPECT_TRUE(out.empty() || sp.begin > prev_end) << "spans must be sorted and apart";
    prev_end = sp.end;
    out.push_back(r.text.substr(sp.begin, sp.end - sp.begin));
  }
  return out;
}

TEST(ChatTemplate, SpansMarkWhatTheClientSent) {
  using V = std::vector<std::string>;
  ChatTemplate chatml{ChatTemplateKind::chatml, kSmolSystem};
  auto r = render_chat_spans(chatml, tool_conversation(), {weather_tool()}, true);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string tool_json =
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
      "\"Get the weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
      "{\"type\": \"string\"}}, \"required\": [\"city\"]}}}";
  EXPECT_EQ(literal_texts(*r), (V{tool_json, "What's the weather in Paris?", "\"get_weather\"",
                                  "{\"city\": \"Paris\"}", "{\"temp\": 21}"}));
  // The default system text comes from the model, not the client.
  auto plain = render_chat_spans(chatml, {{"user", "Hi", {}, "", ""}}, {}, true);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(literal_texts(*plain), V{"Hi"});

  // Llama 3 trims contents: the spans are what is left.
  ChatTemplate l3{ChatTemplateKind::llama3, ""};
  auto r3 = render_chat_spans(
      l3, {{"system", " S ", {}, "", ""}, {"user", "\n a b \n", {}, "", ""}}, {}, true);
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(literal_texts(*r3), (V{"S", "a b"}));

  // Llama 2 trims a turn that mixes the system block, tool definitions and the user's text.
  ChatTemplate l2{ChatTemplateKind::llama2, ""};
  auto r2 = render_chat_spans(l2,
                              {{"system", "  Be kind.", {}, "", ""},
                               {"user", "Hi  ", {}, "", ""},
                               {"assistant", "", {ToolCall{"1", "f", "{}"}}, "", ""}},
                              {ToolDefinition{"f", "", ""}}, true);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->text,
            "<s>[INST] <<SYS>>\nBe kind.\n\nYou can call these functions. To call one, answer "
            "with only a JSON object {\"name\": function name, \"arguments\": dictionary of "
            "arguments}.\n{\"type\": \"function\", \"function\": {\"name\": \"f\"}}\n<</SYS>>\n\n"
            "Hi [/INST] {\"name\": \"f\", \"arguments\": {}} </s>");
  EXPECT_EQ(literal_texts(*r2),
            (V{"Be kind.", "{\"type\": \"function\", \"function\": {\"name\": \"f\"}}", "Hi",
               "\"f\"", "{}"}));
  // render_chat is the text alone.
  EXPECT_EQ(render(l2,
                   {{"system", "  Be kind.", {}, "", ""},
                    {"user", "Hi  ", {}, "", ""},
                    {"assistant", "", {ToolCall{"1", "f", "{}"}}, "", ""}},
                   {ToolDefinition{"f", "", ""}}),
            r2->text);
}

// `depth` (>= 1) nested objects {"a": {"a": ... {}}}, with `leaves` string properties at each
// level but the innermost.
std::string nested_schema(int depth, int leaves) {
  std::string leaf_props;
  for (int i = 0; i < leaves; ++i) leaf_props += "\"p" + std::to_string(i) + "\": \"x\", ";
  std::string s;
  for (int d = 1; d < depth; ++d) s += "{" + leaf_props + "\"a\": ";
  s += "{}";
  s += std::string(static_cast<size_t>(depth - 1), '}');
  return s;
}

TEST(ChatTemplate, DeepJsonIsRefusedBeforeParsing) {
  const std::vector<ChatMessage> user = {{"user", "x", {}, "", ""}};
  for (ChatTemplateKind k :
       {ChatTemplateKind::chatml, ChatTemplateKind::llama3, ChatTemplateKind::llama2}) {
    ChatTemplate t{k, ""};
    for (int depth : {129, 200, 50000}) {  // 50,000: the depth that overflowed the stack
      auto r = render_chat(t, user, {ToolDefinition{"deep", "", nested_schema(depth, 0)}}, true);
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.error().message, "the parameters of tool 'deep' nest deeper than 128 levels");
    }
    // At the limit it renders.
    EXPECT_TRUE(render_chat(t, user, {ToolDefinition{"ok", "", nested_schema(128, 0)}}, true).ok());
    // Tool-call arguments alike (30,000 levels crashed the server).
    for (const std::string& args :
         {nested_schema(200, 0), std::string(30000, '[') + std::string(30000, ']')}) {
      ChatMessage call{"assistant", "", {ToolCall{"1", "f", args}}, "", ""};
      auto r = render_chat(t, {user[0], call}, {}, true);
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.error().message,
                "the arguments of the call to tool 'f' nest deeper than 128 levels");
    }
  }
}

TEST(ChatTemplate, OutputHasAByteBudget) {
  // Llama 3 indents schemas by 4 spaces a level: 120 levels of 8 leaves are 12 KB of JSON
  // but 300 KB rendered (the indentation grows with the square of the depth). Past the
  // budget the rendering stops with an error.
  const std::string schema = nested_schema(120, 8);
  EXPECT_LT(schema.size(), 20000u);
  ChatTemplate l3{ChatTemplateKind::llama3, ""};
  const std::vector<ChatMessage> user = {{"user", "x", {}, "", ""}};
  const std::vector<ToolDefinition> tools = {{"t", "", schema}};
  auto within = render_chat(l3, user, tools, true);
  ASSERT_TRUE(within.ok()) << within.error().message;
  EXPECT_GT(within->size(), 20 * schema.size());
  auto over = render_chat(l3, user, tools, true, 100000);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().message, "the rendered prompt is larger than 100000 bytes");
  // Exactly at the budget is allowed; one byte under is not.
  EXPECT_TRUE(render_chat(l3, user, tools, true, within->size()).ok());
  EXPECT_FALSE(render_chat(l3, user, tools, true, within->size() - 1).ok());
  // The other families and plain content have the same budget.
  const std::vector<ChatMessage> long_user = {{"user", std::string(5000, 'a'), {}, "", ""}};
  for (ChatTemplateKind k :
       {ChatTemplateKind::chatml, ChatTemplateKind::llama3, ChatTemplateKind::llama2}) {
    ChatTemplate t{k, ""};
    auto r = render_chat(t, long_user, {}, true, 4096);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message, "the rendered prompt is larger than 4096 bytes");
    EXPECT_TRUE(render_chat(t, long_user, {}, true, 8192).ok());
  }
}

// The model's own Jinja template: the default model's renders plain chats exactly as the
// built-in ChatML does; it never reads `tools`, so conversations with tools go to the
// built-in ChatML (Hermes tools) and tool calling keeps working.
TEST(ChatTemplate, ModelJinjaTemplateAndToolFallback) {
  const json fx = json::parse(testing::read_file(testing::fixture_path("tokenizer_smollm2.json")));
  const std::string src = fx["chat_template"].get<std::string>();
  auto t = load_chat_template("", src, "<|im_start|>", "<|im_end|>");
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_TRUE(t->jinja);
  EXPECT_FALSE(t->jinja_reads_tools);
  EXPECT_EQ(t->kind, ChatTemplateKind::chatml);
  auto builtin = resolve_chat_template("", src);
  ASSERT_TRUE(builtin.ok());
  const std::vector<ChatMessage> chat = {
      {"user", "Hi", {}, "", ""}, {"assistant", "Hello!", {}, "", ""}, {"user", "Bye", {}, "", ""}};
  EXPECT_EQ(render(*t, chat), render(*builtin, chat));
  EXPECT_EQ(render(*t, chat, {}, false), render(*builtin, chat, {}, false));
  EXPECT_EQ(render(*t, tool_conversation(), {weather_tool()}),
            render(*builtin, tool_conversation(), {weather_tool()}));
  EXPECT_NE(render(*t, tool_conversation(), {weather_tool()}).find("<tool_call>"),
            std::string::npos);
  // Named families still win over the model's template.
  auto named = load_chat_template("llama3", src, "", "");
  ASSERT_TRUE(named.ok());
  EXPECT_FALSE(named->jinja);
  EXPECT_EQ(named->kind, ChatTemplateKind::llama3);
}

TEST(ChatTemplate, JinjaTemplateThatRendersTools) {
  const std::string src =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
      "{% for c in m.tool_calls %}<tool_call>{{ c.function|tojson }}</tool_call>{% endfor %}"
      "<|im_end|>\n{% endfor %}{% if tools %}[{{ tools|map(attribute='function.name')|join(',') "
      "}}]{% endif %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  auto t = load_chat_template("", src, "", "");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_TRUE(t->jinja_reads_tools);
  EXPECT_EQ(t->kind, ChatTemplateKind::chatml);  // <tool_call>: Hermes
  EXPECT_EQ(render(*t, tool_conversation(), {weather_tool()}),
            "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n<|im_start|>assistant\n"
            "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"
            "</tool_call><|im_end|>\n<|im_start|>tool\n{\"temp\": 21}<|im_end|>\n[get_weather]"
            "<|im_start|>assistant\n");
  // The tool-call family follows what the template teaches.
  auto mistral = load_chat_template("", "{{ tools }}[TOOL_CALLS]{{ messages[0].content }}", "", "");
  ASSERT_TRUE(mistral.ok());
  EXPECT_EQ(mistral->kind, ChatTemplateKind::llama2);
  auto llama = load_chat_template("", "{{ tools }}<|python_tag|>{{ messages[0].content }}", "", "");
  ASSERT_TRUE(llama.ok());
  EXPECT_EQ(llama->kind, ChatTemplateKind::llama3);
  // A template without tools and without a known framing refuses tool conversations.
  auto plain = load_chat_template("", "{% for m in messages %}{{ m.content }}{% endfor %}", "", "");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->has_family);
  auto r = render_chat(*plain, tool_conversation(), {weather_tool()}, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no tool format"), std::string::npos);
}

TEST(ChatTemplate, JinjaTemplateErrorsAtLoad) {
  auto unsupported =
      load_chat_template("", "{% for m in messages %}{{ m|frob }}{% endfor %}", "", "");
  ASSERT_FALSE(unsupported.ok());
  EXPECT_NE(unsupported.error().message.find("filter 'frob'"), std::string::npos);
  EXPECT_NE(unsupported.error().message.find("--chat-template"), std::string::npos);
  auto raising = load_chat_template("", "{{ raise_exception('only tools') }}", "", "");
  ASSERT_FALSE(raising.ok());
  EXPECT_NE(raising.error().message.find("only tools"), std::string::npos);
  EXPECT_FALSE(load_chat_template("", "", "", "").ok());  // no template at all
  // Client JSON past the depth limit is refused before it is parsed.
  auto t = load_chat_template("", "{{ tools|tojson }}{{ messages|length }}", "", "");
  ASSERT_TRUE(t.ok());
  const std::vector<ToolDefinition> deep = {
      {"t", "", std::string(500, '[') + std::string(500, ']')}};
  auto r = render_chat(*t, {{"user", "x", {}, "", ""}}, deep, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("deeper"), std::string::npos);
}

}  // namespace
}  // namespace infercept
