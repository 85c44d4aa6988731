// The one tool-call parser (engine/tool_call.h): the engine's pause triggers and the whole
// turns the server reports read the same calls, and a malformed call is text to both.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "engine/tool_call.h"

namespace infercept {
namespace {

constexpr ToolCallFormat kHermes = ToolCallFormat::hermes;
constexpr ToolCallFormat kJson = ToolCallFormat::json_turn;

// While a Hermes turn is generated: its first closed call (what pauses the engine).
std::optional<ParsedToolCall> find_hermes_tool_call(const std::string& text) {
  return find_tool_call(text, TurnFormat{kHermes, false});
}

// A whole JSON turn's first call, if the turn is calls.
std::optional<ParsedToolCall> parse_json_tool_call(const std::string& text) {
  ParsedTurn turn = parse_tool_turn(text, kJson);
  if (turn.calls.empty()) return std::nullopt;
  return std::move(turn.calls.front());
}

TEST(ToolCall, HermesCompleteCallIsFoundWithNameAndArguments) {
  auto c = find_hermes_tool_call(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "get_weather");
  EXPECT_EQ(c->arguments_json, "{\"city\": \"Paris\"}");  // as the model wrote it
}

TEST(ToolCall, HermesIncompleteOrAbsentIsNotACall) {
  EXPECT_FALSE(find_hermes_tool_call("<tool_call>{\"name\": \"x\""));
  EXPECT_FALSE(find_hermes_tool_call("<tool_call>{\"name\": \"x\"}"));  // not closed yet
  EXPECT_FALSE(find_hermes_tool_call("no call here"));
  EXPECT_FALSE(find_hermes_tool_call("</tool_call> before <tool_call>"));
}

// The rule: a block that is not a JSON object with a non-empty string "name" is text. It does
// not pause the request, and the server returns it as content.
TEST(ToolCall, HermesMalformedBodyIsTextAndDoesNotPause) {
  for (const char* body : {"not json", "{\"name\": 42}", "{\"name\": \"\"}", "[1, 2]",
                           "{\"arguments\": {}}", "{\"name\": \"x\", }"}) {
    const std::string text = std::string("Sure.\n<tool_call>") + body + "</tool_call>";
    EXPECT_FALSE(find_hermes_tool_call(text)) << body;
    ParsedTurn turn = parse_tool_turn(text, kHermes);
    EXPECT_TRUE(turn.calls.empty()) << body;
    EXPECT_EQ(turn.content, text) << body;
  }
}

TEST(ToolCall, HermesMalformedBlockThenACallBothAgree) {
  const std::string text =
      "<tool_call>oops</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": "
      "{\"q\": \"x\"}}\n</tool_call>";
  auto found = find_hermes_tool_call(text);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->name, "search");
  ParsedTurn turn = parse_tool_turn(text, kHermes);
  ASSERT_EQ(turn.calls.size(), 1u);
  EXPECT_EQ(turn.calls[0].name, "search");
  EXPECT_EQ(turn.calls[0].arguments_json, "{\"q\": \"x\"}");
  EXPECT_EQ(turn.content, "<tool_call>oops</tool_call>");  // the malformed block, as text
  // An opening tag inside a malformed block does not hide the call after it.
  const std::string nested = "<tool_call>bad <tool_call>{\"name\": \"a\"}</tool_call>";
  ASSERT_TRUE(find_hermes_tool_call(nested));
  EXPECT_EQ(find_hermes_tool_call(nested)->name, "a");
  ParsedTurn t2 = parse_tool_turn(nested, kHermes);
  ASSERT_EQ(t2.calls.size(), 1u);
  EXPECT_EQ(t2.content, "<tool_call>bad");
}

TEST(ToolCall, HermesWholeTurnContentAndSeveralCalls) {
  ParsedTurn turn = parse_tool_turn(
      "Checking both.\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"b\": 1, \"a\": 2}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"v\", \"arguments\": \"{\\\"x\\\": 1}\"}\n"
      "</tool_call>\n",
      kHermes);
  ASSERT_EQ(turn.calls.size(), 2u);
  EXPECT_EQ(turn.calls[0].arguments_json, "{\"b\": 1, \"a\": 2}");  // as the model wrote it
  EXPECT_EQ(turn.calls[1].name, "v");
  EXPECT_EQ(turn.calls[1].arguments_json, "{\"x\": 1}");  // a string is taken as the text
  EXPECT_EQ(turn.content, "Checking both.");
  // Only calls and white space: no content.
  EXPECT_EQ(parse_tool_turn("\n<tool_call>{\"name\": \"w\"}</tool_call>\n", kHermes).content, "");
  EXPECT_EQ(parse_tool_turn("\n<tool_call>{\"name\": \"w\"}</tool_call>\n", kHermes)
                .calls[0]
                .arguments_json,
            "{}");
}

TEST(ToolCall, HermesTurnMayEndWithoutTheClosingTag) {
  ParsedTurn turn = parse_tool_turn("<tool_call>\n{\"name\": \"w\", \"arguments\": {}}", kHermes);
  ASSERT_EQ(turn.calls.size(), 1u);
  EXPECT_EQ(turn.calls[0].name, "w");
  // Cut in the middle of its JSON: text.
  ParsedTurn cut = parse_tool_turn("<tool_call>\n{\"name\": \"w\", \"argu", kHermes);
  EXPECT_TRUE(cut.calls.empty());
  EXPECT_EQ(cut.content, "<tool_call>\n{\"name\": \"w\", \"argu");
}

TEST(ToolCall, DeepArgumentsAreNotACall) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string text = "<tool_call>{\"name\": \"x\", \"arguments\": " + deep + "}</tool_call>";
  EXPECT_FALSE(find_hermes_tool_call(text));
  EXPECT_TRUE(parse_tool_turn(text, kHermes).calls.empty());
}

TEST(ToolCall, Llama3JsonTurn) {
  auto c = parse_json_tool_call(
      " {\"name\": \"search\", \"parameters\": {\"q\": \"tallest mountain\"}} ");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "search");
  EXPECT_EQ(c->arguments_json, "{\"q\": \"tallest mountain\"}");
  auto p = parse_json_tool_call("<|python_tag|>{\"name\": \"calc\"}");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->name, "calc");
  EXPECT_EQ(p->arguments_json, "{}");
  // "arguments" is read when "parameters" is absent (Llama 2 and models that mix them up).
  EXPECT_EQ(parse_json_tool_call("{\"name\": \"a\", \"arguments\": {\"k\": 1}}")->arguments_json,
            "{\"k\": 1}");
  EXPECT_FALSE(parse_json_tool_call("The answer is {\"name\": 1}"));
  EXPECT_FALSE(parse_json_tool_call("{\"parameters\": {}}"));
  EXPECT_FALSE(parse_json_tool_call("{\"name\": 42}"));
}

TEST(ToolCall, JsonTurnOneCallPerLine) {
  const std::string text =
      "{\"name\": \"a\", \"parameters\": {}}\n{\"name\": \"b\", \"parameters\": {\"x\": 1}}";
  ParsedTurn turn = parse_tool_turn(text, kJson);
  ASSERT_EQ(turn.calls.size(), 2u);
  EXPECT_EQ(turn.calls[1].name, "b");
  EXPECT_EQ(turn.content, "");
  ASSERT_TRUE(parse_json_tool_call(text));  // the engine pauses on such a turn
  EXPECT_EQ(parse_json_tool_call(text)->name, "a");
}

// A JSON turn with one line that is not a call is text, all of it, to the engine and the
// server alike.
TEST(ToolCall, JsonTurnMalformedIsTextAndDoesNotPause) {
  for (const char* text : {"{\"name\": \"a\", \"parameters\": {}}\nand then some words",
                           "{\"name\": \"a\", \"parameters\": {", "{\"name\": null}",
                           "<|python_tag|>{not json}", "{\"name\": \"\"}"}) {
    EXPECT_FALSE(parse_json_tool_call(text)) << text;
    ParsedTurn turn = parse_tool_turn(text, kJson);
    EXPECT_TRUE(turn.calls.empty()) << text;
    EXPECT_EQ(turn.content, text) << text;
  }
}

TEST(ToolCall, FormatFollowsTheChatTemplate) {
  EXPECT_EQ(tool_call_format(ChatTemplateKind::chatml), ToolCallFormat::hermes);
  EXPECT_EQ(tool_call_format(ChatTemplateKind::llama3), ToolCallFormat::json_turn);
  EXPECT_EQ(tool_call_format(ChatTemplateKind::llama2), ToolCallFormat::json_turn);
  // A Hermes block is not a call in a JSON-turn format, and the other way round.
  EXPECT_TRUE(parse_tool_turn("<tool_call>{\"name\": \"a\"}</tool_call>", kJson).calls.empty());
  EXPECT_TRUE(parse_tool_turn("{\"name\": \"a\"}", kHermes).calls.empty());
}

}  // namespace
}  // namespace infercept

#include "engine/request.h"

namespace infercept {
namespace {

// A vocabulary of single characters and Mistral's control tokens: the engine renders a
// format's control-token markers when the request reads calls (left out otherwise), and a
// Mistral turn's call pauses the request at the end of the turn.
TEST(ToolCall, EngineRendersControlMarkersAndPausesAtAMistralCall) {
  TokenizerSpec spec;
  spec.kind = TokenizerKind::byte_bpe;
  for (char c : std::string("abcdefghijklmnopqrstuvwxyz_{}[]\":,.0123456789"))
    spec.tokens.push_back(std::string(1, c));
  const int32_t n_chars = (int32_t)spec.tokens.size();
  spec.tokens.insert(spec.tokens.end(), {"[TOOL_CALLS]", "[ARGS]", "</s>"});
  spec.types.assign(spec.tokens.size(), TokenType::normal);
  for (int32_t i = n_chars; i < (int32_t)spec.tokens.size(); ++i)
    spec.types[(size_t)i] = TokenType::control;
  spec.eos_id = n_chars + 2;
  auto tok = Tokenizer::create(spec);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  const TurnFormat format{ToolCallFormat::mistral, false};
  std::vector<int32_t> markers;
  for (const std::string& m : turn_markers(format))
    if (auto id = (*tok)->token_id(m); id && (*tok)->is_control(*id)) markers.push_back(*id);
  ASSERT_EQ(markers.size(), 2u);  // [TOOL_CALLS] and [ARGS]; no [CALL_ID] here

  auto ids = [&](const std::string& s) {
    std::vector<int32_t> v;
    for (char c : s) v.push_back(*(*tok)->token_id(std::string(1, c)));
    return v;
  };
  std::vector<int32_t> turn = {n_chars};  // [TOOL_CALLS]
  for (int32_t t : ids("get_weather")) turn.push_back(t);
  turn.push_back(n_chars + 1);  // [ARGS]
  for (int32_t t : ids("{\"city\":\"paris\"}")) turn.push_back(t);
  turn.push_back(spec.eos_id);

  for (bool reads_calls : {true, false}) {
    GenerateRequest req;
    req.prompt = ids("hi");
    req.params.max_tokens = 100;
    req.pause_at_tool_turn_end = reads_calls;
    Request r(1, req, 1, **tok, format, markers, 0.0);
    std::string text;
    TokenOutcome last;
    for (int32_t t : turn) {
      r.seq.tokens.push_back(t);
      RequestOutput out;
      last = r.on_token(t, 1000, out);
      text += out.text;
    }
    if (reads_calls) {
      EXPECT_EQ(text, "[TOOL_CALLS]get_weather[ARGS]{\"city\":\"paris\"}");
      EXPECT_EQ(last.kind, TokenOutcome::Kind::pause);
      EXPECT_EQ(last.pause.tool, "get_weather");
    } else {
      EXPECT_EQ(text, "get_weather{\"city\":\"paris\"}");  // control tokens left out
      EXPECT_EQ(last.kind, TokenOutcome::Kind::finish);
    }
  }
}

}  // namespace
}  // namespace infercept
