// The server with a model's own chat template where the template decides how a turn is read
// and written: chat_template_kwargs reach it (Qwen3's enable_thinking false), a generation
// prompt that opens <think> makes the turn reasoning until </think>, and a Mistral template's
// forced calls are written as its [TOOL_CALLS] calls (constraint, forced start and parser
// alike) with ids its template accepts back, so the round trip renders the same calls.
// The real templates come from build/chat-templates (`make chat-templates`); the tests that
// need one are skipped without it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "grammar/matcher.h"
#include "server/constraints.h"
#include "server/tool_parser.h"
#include "server_harness.h"

namespace infercept::testing {
namespace {

namespace fs = std::filesystem;

std::string real_template_path(const std::string& name) {
  const std::string p =
      std::string(INFERCEPT_SOURCE_DIR) + "/build/chat-templates/" + name + ".jinja";
  return fs::exists(p) ? p : "";
}

// A file under the test's temporary folder holding `text`.
std::string write_template(const std::string& name, const std::string& text) {
  const fs::path dir =
      fs::temp_directory_path() / ("infercept_templates_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path p = dir / name;
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

EngineConfig with_template(const std::string& path) {
  EngineConfig c = server_test_engine_config();
  c.chat_template_file = path;
  return c;
}

// The default model's tokenizer, to read the prompts the server reports (return_token_ids).
const Tokenizer& tokenizer() {
  static std::unique_ptr<EngineCore> core = [] {
    EngineConfig c = server_test_engine_config();
    c.kv_cache_tokens = 256;
    auto e = EngineCore::create(c);
    EXPECT_TRUE(e.ok());
    return std::move(*e);
  }();
  return core->tokenizer();
}

std::string prompt_text(const json& response) {
  return tokenizer().decode(response.at("prompt_token_ids").get<std::vector<int32_t>>(),
                            /*render_special=*/true);
}

json user_turn(const std::string& model, const std::string& text = "Say hello.") {
  return {{"model", model},
          {"messages", {{{"role", "user"}, {"content", text}}}},
          {"temperature", 0},
          {"max_tokens", 12},
          {"return_token_ids", true}};
}

// --- chat_template_kwargs ------------------------------------------------------------------

TEST(ServerTemplates, KwargsParsed) {
  server::RequestLimits limits;
  server::ChatRequest cr;
  json body = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}};
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  ASSERT_FALSE(server::parse_chat_request(body, limits, cr).has_value());
  EXPECT_EQ(cr.chat_template_kwargs_json, R"({"enable_thinking":false})");
  body["chat_template_kwargs"] = 5;
  auto e = server::parse_chat_request(body, limits, cr);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "chat_template_kwargs");
}

TEST(ServerTemplates, KwargsAreValidatedInOpenAIErrorFormat) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  json body = user_turn(s.model());
  body["chat_template_kwargs"] = 5;
  Reply r = s.post("/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "chat_template_kwargs");
  EXPECT_EQ(r.body["error"]["type"], "invalid_request_error");
  body["chat_template_kwargs"] = {{"messages", json::array()}};
  r = s.post("/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "chat_template_kwargs.messages");
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("messages"), std::string::npos);
  body["chat_template_kwargs"] = {{"add_generation_prompt", false}};
  EXPECT_EQ(s.post("/v1/chat/completions", body).status, 400);
  body["chat_template_kwargs"] = {{"enable_thinking", false}, {"custom", {{"a", {1, 2}}}}};
  EXPECT_EQ(s.post("/v1/chat/completions", body).status, 200);
  body["chat_template_kwargs"] = nullptr;
  EXPECT_EQ(s.post("/v1/chat/completions", body).status, 200);
}

// Qwen3's real template with enable_thinking false: the prompt closes the empty block and the
// turn is content; without the kwargs the prompt leaves the block to the model.
TEST(ServerTemplates, Qwen3EnableThinkingFalse) {
  const std::string path = real_template_path("Qwen-Qwen3-0.6B");
  if (path.empty()) GTEST_SKIP() << "build/chat-templates not fetched (make chat-templates)";
  TestServer s(server_test_options(), with_template(path));
  ASSERT_TRUE(s.ok());
  json body = user_turn(s.model());
  const Reply plain = s.post("/v1/chat/completions", body);
  ASSERT_EQ(plain.status, 200) << plain.raw;
  EXPECT_TRUE(prompt_text(plain.body).ends_with("<|im_start|>assistant\n"));
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  const Reply off = s.post("/v1/chat/completions", body);
  ASSERT_EQ(off.status, 200) << off.raw;
  EXPECT_TRUE(prompt_text(off.body).ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"))
      << prompt_text(off.body);
  const json& m = off.body["choices"][0]["message"];
  EXPECT_FALSE(m.contains("reasoning_content")) << m;
  const std::string text =
      tokenizer().decode(off.body["choices"][0]["token_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(m["content"].get<std::string>(), text.substr(0, text.find("<|im_end|>")));
  // The follow-up with the same kwargs renders the first request's conversation first.
  json follow = body;
  follow["messages"].push_back({{"role", "assistant"}, {"content", m["content"]}});
  follow["messages"].push_back({{"role", "user"}, {"content", "Again."}});
  const Reply next = s.post("/v1/chat/completions", follow);
  ASSERT_EQ(next.status, 200) << next.raw;
  const std::string p1 = prompt_text(off.body), p2 = prompt_text(next.body);
  const std::string before = p1.substr(0, p1.rfind("<|im_start|>assistant\n"));
  EXPECT_TRUE(p2.starts_with(before + "<|im_start|>assistant\n"));
  EXPECT_TRUE(p2.ends_with("<think>\n\n</think>\n\n"));
}

// --- a generation prompt that opens <think> --------------------------------------------------

// ChatML whose generation prompt opens the reasoning block, as DeepSeek-R1 distills and QwQ
// do; it writes <tool_call> calls back, as Qwen's templates do.
const char* kOpensThink =
    "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') }}"
    "{%- if m.tool_calls %}{%- for c in m.tool_calls %}{{ '<tool_call>\\n' + "
    "{'name': c.function.name, 'arguments': c.function.arguments} | tojson + '\\n</tool_call>' }}"
    "{%- endfor %}{%- endif %}{{ '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if tools %}{{ '<|im_start|>system\\nTools: ' + tools | tojson + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}";

// The model's text, before it writes </think>, is reasoning: reasoning_content, not content,
// whole and streamed.
TEST(ServerTemplates, PromptThatOpensThinkMakesTheTurnReasoning) {
  TestServer s(server_test_options(),
               with_template(write_template("opens_think.jinja", kOpensThink)));
  ASSERT_TRUE(s.ok());
  const json body = user_turn(s.model());
  const Reply r = s.post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_TRUE(prompt_text(r.body).ends_with("<|im_start|>assistant\n<think>\n"));
  const std::string text =
      tokenizer().decode(r.body["choices"][0]["token_ids"].get<std::vector<int32_t>>());
  ASSERT_EQ(text.find("</think>"), std::string::npos)
      << "the tiny model closed the block: " << text;
  const json& m = r.body["choices"][0]["message"];
  ASSERT_TRUE(m.contains("reasoning_content")) << m;
  EXPECT_EQ(m["reasoning_content"].get<std::string>(), text.substr(0, text.find("<|im_end|>")));
  EXPECT_TRUE(m["content"].is_null() || m["content"] == "") << m;
  // Streamed: the same reasoning in reasoning_content deltas, no content.
  json sb = body;
  sb["stream"] = true;
  const Reply st = s.post("/v1/chat/completions", sb);
  ASSERT_EQ(st.status, 200);
  std::string reasoning, content;
  for (const json& e : sse_events(st.raw)) {
    if (!e.contains("choices") || e["choices"].empty()) continue;
    const json& d = e["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content") && d["content"].is_string())
      content += d["content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, m["reasoning_content"].get<std::string>());
  EXPECT_EQ(content, "");
}

// A forced call on such a template: the prompt closes the block first (the grammar writes the
// call, not reasoning), and the call is read.
TEST(ServerTemplates, ForcedCallAfterAnOpenedThinkBlock) {
  TestServer s(server_test_options(),
               with_template(write_template("opens_think.jinja", kOpensThink)));
  ASSERT_TRUE(s.ok());
  json body = weather_request(s.model());
  body["tool_choice"] = "required";
  const Reply r = s.post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  const std::string p = prompt_text(r.body);
  EXPECT_TRUE(p.ends_with("<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"")) << p;
  const json& m = r.body["choices"][0]["message"];
  ASSERT_TRUE(m.contains("tool_calls")) << m;
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_FALSE(m.contains("reasoning_content")) << m;
}

// --- Mistral's [TOOL_CALLS] ------------------------------------------------------------------

struct MistralCase {
  const char* file;
  grammar::ToolCallSyntax::Shape shape;
  const char* generated;  // a forced call as the constraint writes it
};

const MistralCase kMistral[] = {
    {"mistralai-Mistral-Nemo-Instruct-2407", grammar::ToolCallSyntax::Shape::list,
     R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}])"},
    {"Mistral-Small-3.2-24B-Instruct-2506", grammar::ToolCallSyntax::Shape::name_args,
     R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"})"},
    {"unsloth-mistral-Devstral-Small-2507", grammar::ToolCallSyntax::Shape::name_args,
     R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"})"},
};

server::ChatRequest forced_weather_request() {
  server::ChatRequest cr;
  cr.tools.push_back({"get_weather", "Get the weather in a city",
                      R"({"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"], "additionalProperties": false})",
                      false});
  cr.tool_choice = server::ToolChoice::required;
  return cr;
}

// The constraint, the forced start and the parser follow the template's own call layout, and
// parse -> OpenAI message -> render with the template -> parse gives the same calls.
TEST(ServerTemplates, MistralForcedCallRoundTrip) {
  int ran = 0;
  for (const MistralCase& mc : kMistral) {
    SCOPED_TRACE(mc.file);
    const std::string path = real_template_path(mc.file);
    if (path.empty()) continue;
    ++ran;
    const std::string src = read_file(path);
    auto tmpl = load_chat_template("", src, "<s>", "</s>");
    ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
    const TurnFormat format = turn_format(*tmpl, "", src);
    ASSERT_EQ(format.calls, ToolCallFormat::mistral);
    const grammar::ToolCallSyntax syntax = server::tool_call_syntax(*tmpl, format);
    EXPECT_EQ(syntax.shape, mc.shape);
    // The grammar: the Mistral call, never a Llama 3.1 JSON turn.
    server::ConstraintCompiler cc;
    std::shared_ptr<const GenerationConstraint> c;
    ASSERT_FALSE(cc.build(forced_weather_request(), syntax, true, c).has_value());
    ASSERT_NE(c, nullptr);
    {
      grammar::Matcher m(c->grammar);
      EXPECT_TRUE(m.advance(mc.generated) && m.accepting());
      grammar::Matcher json_turn(c->grammar);
      EXPECT_FALSE(
          json_turn.advance(R"({"name": "get_weather", "parameters": {"city": "Paris"}})"));
      grammar::Matcher other(c->grammar);
      EXPECT_FALSE(other.advance(R"([TOOL_CALLS][{"name": "get_time")"));
    }
    // The forced start is the grammar's and the generated text begins with it.
    const std::string prefix = server::forced_tool_prefix(syntax, server::ToolChoice::required, "");
    EXPECT_TRUE(std::string(mc.generated).starts_with(prefix)) << prefix;
    EXPECT_TRUE(grammar::Matcher(c->grammar).advance(prefix));
    const std::string named =
        server::forced_tool_prefix(syntax, server::ToolChoice::named, "get_weather");
    EXPECT_TRUE(std::string(mc.generated).starts_with(named)) << named;
    // Read into OpenAI calls with ids the template accepts (9 alphanumerics).
    const server::AssistantTurn turn = server::parse_assistant_turn(mc.generated, format);
    ASSERT_EQ(turn.calls.size(), 1u);
    EXPECT_EQ(turn.calls[0].name, "get_weather");
    EXPECT_EQ(turn.calls[0].arguments_json, R"({"city": "Paris"})");
    ASSERT_EQ(turn.calls[0].id.size(), 9u);
    for (char ch : turn.calls[0].id)
      EXPECT_TRUE(std::isalnum((unsigned char)ch)) << turn.calls[0].id;
    // Sent back with the tool's result: the template renders it, the call as generated (the
    // list layout adds the id after the arguments), and the render reads as the same call.
    ChatMessage user{"user", "Weather in Paris?", {}, "", ""};
    ChatMessage assistant{"assistant", "", turn.calls, "", ""};
    ChatMessage result{"tool", "sunny", {}, turn.calls[0].id, "get_weather"};
    auto r = render_chat(*tmpl, {user, assistant, result}, {}, false);
    ASSERT_TRUE(r.ok()) << r.error().message;
    const std::string g = mc.generated;
    const std::string expect_in_render =
        mc.shape == grammar::ToolCallSyntax::Shape::list ? g.substr(0, g.size() - 2) : g;
    if (std::string(mc.file).find("Small-3.2") != std::string::npos) {
      // This one writes [CALL_ID]<id> between the name and [ARGS].
      EXPECT_NE(r->find("[TOOL_CALLS]get_weather[CALL_ID]" + turn.calls[0].id +
                        R"([ARGS]{"city": "Paris"})"),
                std::string::npos)
          << *r;
    } else {
      EXPECT_NE(r->find(expect_in_render), std::string::npos) << *r;
    }
    const size_t at = r->find("[TOOL_CALLS]");
    ASSERT_NE(at, std::string::npos);
    const std::string rendered_turn = r->substr(at, r->find("</s>", at) - at);
    const server::AssistantTurn again = server::parse_assistant_turn(rendered_turn, format);
    ASSERT_EQ(again.calls.size(), 1u) << rendered_turn;
    EXPECT_EQ(again.calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(again.calls[0].arguments_json), json::parse(R"({"city": "Paris"})"));
    EXPECT_EQ(again.content, "");
    auto r2 = render_chat(*tmpl, {user, assistant, result}, {}, false);
    EXPECT_EQ(*r2, *r);
  }
  if (ran == 0) GTEST_SKIP() << "build/chat-templates not fetched (make chat-templates)";
}

// Through the server: tool_choice required on Mistral-Nemo's template comes back as a call in
// its [TOOL_CALLS] list (not a JSON turn read as text), and the follow-up that sends it back
// renders (its template refuses ids that are not 9 alphanumerics).
TEST(ServerTemplates, MistralRequiredCallThroughTheServer) {
  const std::string path = real_template_path("mistralai-Mistral-Nemo-Instruct-2407");
  if (path.empty()) GTEST_SKIP() << "build/chat-templates not fetched (make chat-templates)";
  TestServer s(server_test_options(), with_template(path));
  ASSERT_TRUE(s.ok());
  json tools = weather_tools();
  tools[0]["function"]["parameters"]["properties"]["city"] = {{"enum", {"Paris", "Rome"}}};
  json body = {{"model", s.model()},
               {"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
               {"tools", tools},
               {"tool_choice", "required"},
               {"temperature", 0},
               {"max_tokens", 40},
               {"return_token_ids", true}};
  const Reply r = s.post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_TRUE(prompt_text(r.body).ends_with("[TOOL_CALLS][{\"name\": \"")) << prompt_text(r.body);
  const json& m = r.body["choices"][0]["message"];
  ASSERT_TRUE(m.contains("tool_calls")) << m;
  ASSERT_EQ(m["tool_calls"].size(), 1u) << m;
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "tool_calls");
  const json& call = m["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "get_weather");
  const json args = json::parse(call["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Rome") << args;
  EXPECT_EQ(call["id"].get<std::string>().size(), 9u);
  // Streamed, the same call.
  json sb = body;
  sb["stream"] = true;
  const Reply st = s.post("/v1/chat/completions", sb);
  const StreamedTurn t = accumulate_stream(sse_events(st.raw));
  ASSERT_EQ(t.calls.size(), 1u) << st.raw;
  EXPECT_EQ(t.calls[0]["function"]["arguments"], call["function"]["arguments"]);
  // The follow-up: the call and its result sent back.
  json follow = body;
  follow["tool_choice"] = "auto";
  follow["messages"] = with_tool_results(body["messages"], m, "sunny");
  const Reply next = s.post("/v1/chat/completions", follow);
  ASSERT_EQ(next.status, 200) << next.raw;
  const std::string p = prompt_text(next.body);
  EXPECT_NE(p.find("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": "),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("\"id\": \"" + call["id"].get<std::string>() + "\"}]"), std::string::npos) << p;
}

}  // namespace
}  // namespace infercept::testing
