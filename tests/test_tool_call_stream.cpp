// The streaming reader of a turn (engine/tool_call_stream.h): fed the same turn cut at every
// byte, its events add up to the whole-turn result, in the same order; a call's name goes out
// as soon as its arguments begin and its arguments in raw pieces; content is held back only
// where a marker may be arriving. Every format, valid and malformed calls, reasoning.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/tool_call.h"
#include "engine/tool_call_stream.h"

namespace infercept {
namespace {

using Kind = TurnEvent::Kind;

const TurnFormat kHermes{ToolCallFormat::hermes, false};
const TurnFormat kJson{ToolCallFormat::json_turn, false};
const TurnFormat kMistral{ToolCallFormat::mistral, false};
const TurnFormat kQwen3{ToolCallFormat::hermes, true};

// The events with neighbours of one kind merged (content with content, a call's argument
// pieces together): what a reader of the stream ends up with, in order.
std::vector<TurnEvent> merged(const std::vector<TurnEvent>& events) {
  std::vector<TurnEvent> m;
  for (const TurnEvent& e : events) {
    const bool joins =
        !m.empty() && m.back().kind == e.kind && m.back().index == e.index &&
        (e.kind == Kind::content || e.kind == Kind::reasoning || e.kind == Kind::call_arguments);
    if (joins)
      m.back().text += e.text;
    else if (!(e.text.empty() && (e.kind == Kind::content || e.kind == Kind::reasoning)))
      m.push_back(e);
  }
  return m;
}

std::string show(const std::vector<TurnEvent>& events) {
  std::string s;
  for (const TurnEvent& e : events) {
    const char* k[] = {"content", "reasoning", "start", "args", "end"};
    s += std::string(k[(int)e.kind]) + "[" + std::to_string(e.index) + "]" +
         (e.kind == Kind::call_end ? (e.valid ? "ok" : "bad") : "'" + e.text + "'") + " ";
  }
  return s;
}

// The turn fed in the given pieces, then finished.
std::vector<TurnEvent> feed(const std::vector<std::string>& pieces, TurnFormat format,
                            bool calls = true) {
  ToolCallStream s(format, calls);
  std::vector<TurnEvent> out;
  for (const std::string& p : pieces) s.push(p, out);
  s.finish(out);
  return out;
}

// What the whole-turn parser reports, rebuilt from a stream's events.
ParsedTurn result_of(const std::vector<TurnEvent>& events) {
  ParsedTurn t;
  std::vector<ParsedToolCall> started;
  for (const TurnEvent& e : events) {
    if (e.kind == Kind::content) t.content += e.text;
    if (e.kind == Kind::reasoning) t.reasoning += e.text;
    if (e.kind == Kind::call_start) started.push_back({e.text, ""});
    if (e.kind == Kind::call_arguments) started.at((size_t)e.index).arguments_json += e.text;
    if (e.kind == Kind::call_end && e.valid) t.calls.push_back(started.at((size_t)e.index));
  }
  return t;
}

// Every cut of the turn (two pieces), byte by byte, and in threes: the same merged events as
// the whole turn fed at once, and the whole-turn parser's result.
void expect_split_invariant(const std::string& turn, TurnFormat format) {
  const std::vector<TurnEvent> whole = merged(feed({turn}, format));
  const ParsedTurn parsed = parse_tool_turn(turn, format);
  const ParsedTurn rebuilt = result_of(whole);
  ASSERT_EQ(rebuilt.content, parsed.content) << turn;
  ASSERT_EQ(rebuilt.reasoning, parsed.reasoning) << turn;
  ASSERT_EQ(rebuilt.calls.size(), parsed.calls.size()) << turn;
  for (size_t i = 0; i < parsed.calls.size(); ++i) {
    EXPECT_EQ(rebuilt.calls[i].name, parsed.calls[i].name) << turn;
    EXPECT_EQ(rebuilt.calls[i].arguments_json, parsed.calls[i].arguments_json) << turn;
  }
  for (size_t k = 0; k <= turn.size(); ++k) {
    const auto cut = merged(feed({turn.substr(0, k), turn.substr(k)}, format));
    ASSERT_EQ(show(cut), show(whole)) << "cut at " << k << " of: " << turn;
  }
  std::vector<std::string> bytes, threes;
  for (size_t i = 0; i < turn.size(); ++i) bytes.push_back(turn.substr(i, 1));
  for (size_t i = 0; i < turn.size(); i += 3) threes.push_back(turn.substr(i, 3));
  EXPECT_EQ(show(merged(feed(bytes, format))), show(whole)) << turn;
  EXPECT_EQ(show(merged(feed(threes, format))), show(whole)) << turn;
}

TEST(ToolCallStream, EveryCutAddsUpToTheWholeTurnHermes) {
  for (const char* turn : {
           "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
           "\"Paris\", \"units\": [\"c\", {\"x\": \"}\\\"\"}]}}\n</tool_call>",
           "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
           "{\"name\": \"b\", \"arguments\": {\"q\": \"<tool_call>\"}}\n</tool_call>",
           "A <tool_call>oops</tool_call> B\n<tool_call>{\"name\": \"f\"}</tool_call>  ",
           "<tool_call>bad <tool_call>{\"name\": \"a\"}</tool_call>",
           "<tool_call>{\"arguments\": {\"k\": 1}, \"name\": \"late\"}</tool_call> after",
           "<tool_call>{\"name\": \"s\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>",
           "<tool_call>{\"name\": \"k\", \"arguments\": {\"a\": 1}, \"id\": 3}</tool_call>",
           "<tool_call>\n{\"name\": \"w\", \"arguments\": {}}",                   // unclosed
           "<tool_call>\n{\"name\": \"w\", \"argu",                               // cut
           "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"a\": 1} oops",       // junk
           "<tool_call>{\"name\": \"w\", \"arguments\": {\"a\" 1}}</tool_call>",  // bad JSON
           "<tool_call>{\"name\": \"w\", \"arguments\": {}} x</tool_call> y",
           "No calls, just <tool_ text and <b>tags</b>.\n\n",
           "  leading and trailing  ",
           "",
       })
    expect_split_invariant(turn, kHermes);
}

TEST(ToolCallStream, EveryCutAddsUpToTheWholeTurnJsonAndMistral) {
  for (const char* turn : {
           "{\"name\": \"search\", \"parameters\": {\"q\": \"tallest {mountain}\"}}",
           " <|python_tag|>{\"name\": \"calc\", \"parameters\": {\"e\": \"1+1\"}}",
           "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}",
           "{\"name\": \"a\", \"parameters\": {}}\n{\"name\": \"b\", \"arguments\": {}}\n",
           "{\"name\": \"a\", \"parameters\": {}}\nand then some words",
           "{\"name\": \"a\", \"parameters\": {\"x\": 1}",
           "<|python_tag|>brave_search.call(query=\"x\")",
           "The answer is {\"name\": 1}",
           "{\"parameters\": {\"q\": 1}, \"name\": \"rev\"}",
       })
    expect_split_invariant(turn, kJson);
  for (const char* turn : {
           "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
           "{\"name\": \"get_time\", \"arguments\": {}}]",
           "Sure. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]t[ARGS]{}",
           "[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{\"city\": \"[ARGS]\"}",
           "[TOOL_CALLS]{\"name\": \"one\", \"arguments\": {\"k\": [1, 2]}}",
           "[TOOL_CALLS] not a call at all",
           "[TOOL_CALLS]get_weather[ARGS]{\"city\": ",
           "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"nope\": 1}]",
           "[TOOL_CALLS]bad name[ARGS]{}",
       })
    expect_split_invariant(turn, kMistral);
}

TEST(ToolCallStream, EveryCutAddsUpToTheWholeTurnReasoning) {
  for (const char* turn : {
           "<think>\nThe user wants the weather. <tool_call> is what I use.\n</think>\n\n"
           "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": \"P\"}}\n</tool_call>",
           "<think>\n\n</think>\n\nHello there.",
           "\n<think>still thinking when the turn was cut",
           "No thinking here <think>x</think>",
           "<think></think>",
       })
    expect_split_invariant(turn, kQwen3);
}

TEST(ToolCallStream, ResultsOfEachFormat) {
  ParsedTurn h = parse_tool_turn(
      "Checking both.\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"b\": 1, \"a\": 2}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"v\", \"arguments\": {}}\n</tool_call>\n",
      kHermes);
  ASSERT_EQ(h.calls.size(), 2u);
  EXPECT_EQ(h.calls[0].arguments_json, "{\"b\": 1, \"a\": 2}");  // as the model wrote it
  EXPECT_EQ(h.calls[1].name, "v");
  EXPECT_EQ(h.content, "Checking both.");

  ParsedTurn j = parse_tool_turn(
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}};\n{\"name\": \"b\", "
      "\"parameters\": {}}",
      kJson);
  ASSERT_EQ(j.calls.size(), 2u);
  EXPECT_EQ(j.calls[0].arguments_json, "{\"x\": 1}");
  EXPECT_EQ(j.calls[1].name, "b");
  EXPECT_EQ(j.content, "");
  // One part that is not a call: the whole turn is text, the call before it too.
  const std::string prose = "{\"name\": \"a\", \"parameters\": {}}\nI called it.";
  EXPECT_TRUE(parse_tool_turn(prose, kJson).calls.empty());
  EXPECT_EQ(parse_tool_turn(prose, kJson).content, prose);

  ParsedTurn m = parse_tool_turn(
      "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"k\": \"v\"}}, {\"name\": \"b\", "
      "\"arguments\": {}}]",
      kMistral);
  ASSERT_EQ(m.calls.size(), 2u);
  EXPECT_EQ(m.calls[0].arguments_json, "{\"k\": \"v\"}");
  EXPECT_EQ(m.calls[1].name, "b");
  EXPECT_EQ(m.content, "");
  ParsedTurn m2 = parse_tool_turn(
      "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]abc123def"
      "[ARGS]{}",
      kMistral);
  ASSERT_EQ(m2.calls.size(), 2u);
  EXPECT_EQ(m2.calls[0].name, "get_weather");
  EXPECT_EQ(m2.calls[0].arguments_json, "{\"city\": \"Paris\"}");
  EXPECT_EQ(m2.calls[1].name, "get_time");
  EXPECT_EQ(m2.calls[1].arguments_json, "{}");
  EXPECT_EQ(parse_tool_turn("[TOOL_CALLS] not a call", kMistral).content,
            "[TOOL_CALLS] not a call");
  // Without the marker (a detokenizer that dropped the control token) nothing is a call.
  EXPECT_TRUE(parse_tool_turn("[{\"name\": \"a\", \"arguments\": {}}]", kMistral).calls.empty());

  ParsedTurn q = parse_tool_turn(
      "<think>\nI need <tool_call> here.\n</think>\n\nOn it.\n<tool_call>\n{\"name\": \"w\", "
      "\"arguments\": {}}\n</tool_call>",
      kQwen3);
  EXPECT_EQ(q.reasoning, "\nI need <tool_call> here.\n");
  EXPECT_EQ(q.content, "On it.");
  ASSERT_EQ(q.calls.size(), 1u);
  // A call inside the reasoning is never a call.
  EXPECT_TRUE(
      parse_tool_turn("<think><tool_call>{\"name\": \"w\"}</tool_call>", kQwen3).calls.empty());
  // Reasoning off: the block is content.
  EXPECT_EQ(parse_tool_turn("<think>x</think>y", kHermes).content, "<think>x</think>y");
}

// A call goes out as soon as its name is complete and its arguments begin; then every byte of
// its arguments as it comes; content is held back only while a marker may be arriving.
TEST(ToolCallStream, NameFirstThenArgumentsAsTheyArrive) {
  const std::string head = "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ";
  const std::string args = "{\"city\": \"Paris\"}";
  ToolCallStream s(kHermes);
  std::vector<TurnEvent> out;
  s.push("Sure.\n<tool_", out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, Kind::content);
  EXPECT_EQ(out[0].text, "Sure.");  // the partial tag and the new line wait
  out.clear();
  s.push(head.substr(12), out);
  EXPECT_TRUE(out.empty()) << show(out);  // the name is known, the arguments not begun
  s.push("{", out);
  ASSERT_EQ(out.size(), 2u) << show(out);
  EXPECT_EQ(out[0].kind, Kind::call_start);
  EXPECT_EQ(out[0].text, "get_weather");
  EXPECT_EQ(out[1].kind, Kind::call_arguments);
  EXPECT_EQ(out[1].text, "{");
  std::string got = "{";
  for (size_t i = 1; i < args.size(); ++i) {
    out.clear();
    s.push(args.substr(i, 1), out);
    ASSERT_EQ(out.size(), 1u) << i;
    EXPECT_EQ(out[0].kind, Kind::call_arguments);
    got += out[0].text;
  }
  EXPECT_EQ(got, args);
  out.clear();
  s.push("}\n</tool_call>", out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, Kind::call_end);
  EXPECT_TRUE(out[0].valid);

  // A JSON turn: the same, and the call ends with the turn.
  ToolCallStream j(kJson);
  out.clear();
  j.push("{\"name\": \"search\", \"parameters\": {\"q\"", out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].text, "search");
  EXPECT_EQ(out[1].text, "{\"q\"");
  out.clear();
  j.push(": 1}}", out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, ": 1}");
  out.clear();
  j.finish(out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, Kind::call_end);

  // Mistral's newer style: the name is known at [ARGS].
  ToolCallStream m(kMistral);
  out.clear();
  m.push("[TOOL_CALLS]get_weather[ARGS]{\"ci", out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].text, "get_weather");
  EXPECT_EQ(out[1].text, "{\"ci");

  // Plain text is not held back beyond a possible marker.
  ToolCallStream c(kHermes);
  out.clear();
  c.push("Hello <b>world</b> and <", out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "Hello <b>world</b> and");
  // Reasoning streams as it comes.
  ToolCallStream r(kQwen3);
  out.clear();
  r.push("<think>\nhmm, let", out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, Kind::reasoning);
  EXPECT_EQ(out[0].text, "\nhmm, let");
}

// A call that breaks after it started: it ends not valid, its text follows as content; the
// whole-turn result is the text alone.
TEST(ToolCallStream, BrokenAfterStartEndsNotValidAndIsContent) {
  const std::string turn =
      "Hi\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"a\": 1} oops</tool_call>";
  const auto events = merged(feed({turn}, kHermes));
  ASSERT_EQ(events.size(), 5u) << show(events);
  EXPECT_EQ(events[1].kind, Kind::call_start);
  EXPECT_EQ(events[3].kind, Kind::call_end);
  EXPECT_FALSE(events[3].valid);
  EXPECT_EQ(events[4].kind, Kind::content);
  const ParsedTurn t = parse_tool_turn(turn, kHermes);
  EXPECT_TRUE(t.calls.empty());
  EXPECT_EQ(t.content, turn);
}

TEST(ToolCallStream, CallsOffReadsReasoningOnly) {
  const auto events =
      merged(feed({"<think>a</think>\n<tool_call>{\"name\": \"w\"}</tool_call>  "}, kQwen3,
                  /*calls=*/false));
  ASSERT_EQ(events.size(), 2u) << show(events);
  EXPECT_EQ(events[0].text, "a");
  EXPECT_EQ(events[1].text, "<tool_call>{\"name\": \"w\"}</tool_call>  ");
}

// Where the template's generation prompt left the turn: its own <think> at the prompt's end
// opens the turn in reasoning, its </think> closes it; client text never counts.
TEST(ToolCallStream, ThinkStartFromThePromptTail) {
  EXPECT_EQ(think_start_of_prompt("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
            ThinkStart::model);
  EXPECT_EQ(think_start_of_prompt("<|im_start|>assistant\n<think>\n"), ThinkStart::inside);
  EXPECT_EQ(think_start_of_prompt("<\xef\xbd\x9c"
                                  "Assistant\xef\xbd\x9c><think>\n"),
            ThinkStart::inside);
  EXPECT_EQ(think_start_of_prompt("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
            ThinkStart::after);
  // An earlier turn's closed block, then a new turn: the model's.
  EXPECT_EQ(think_start_of_prompt("<think>a</think>b<|im_end|>\n<|im_start|>assistant\n"),
            ThinkStart::model);
  // A prompt that ends in a client's message ending "<think>" (an assistant prefill).
  const std::string p = "<|im_start|>assistant\nI say <think>";
  const std::vector<TextSpan> client{{p.find("I say"), p.size()}};
  EXPECT_EQ(think_start_of_prompt(p, client), ThinkStart::model);
  EXPECT_EQ(think_start_of_prompt(p), ThinkStart::inside);
}

// A prompt that opened <think> (DeepSeek-R1 distills, QwQ): the model writes the reasoning and
// </think> only; without the start mode its reasoning would be content, and a call it
// mentions while thinking a call.
TEST(ToolCallStream, PromptOpenedTheReasoningBlock) {
  const TurnFormat inside{ToolCallFormat::hermes, true, ThinkStart::inside};
  const char* turn =
      "The user wants <tool_call> weather.\n</think>\n\nChecking.\n<tool_call>\n{\"name\": "
      "\"w\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const ParsedTurn t = parse_tool_turn(turn, inside);
  EXPECT_EQ(t.reasoning, "The user wants <tool_call> weather.\n");
  EXPECT_EQ(t.content, "Checking.");
  ASSERT_EQ(t.calls.size(), 1u);
  EXPECT_EQ(t.calls[0].arguments_json, "{\"city\": \"Paris\"}");
  expect_split_invariant(turn, inside);
  // The turn cut before </think>: all reasoning, no content.
  const ParsedTurn cut = parse_tool_turn("Still thinking about <tool_call>", inside);
  EXPECT_EQ(cut.reasoning, "Still thinking about <tool_call>");
  EXPECT_EQ(cut.content, "");
  EXPECT_TRUE(cut.calls.empty());
  // The start mode decides even where the template text showed no reasoning.
  EXPECT_EQ(parse_tool_turn("a</think>b", {ToolCallFormat::json_turn, false, ThinkStart::inside})
                .reasoning,
            "a");
}

// A prompt that closed the block (Qwen3 with enable_thinking false): the turn is content from
// its first byte; a <think> the model writes then is text.
TEST(ToolCallStream, PromptClosedTheReasoningBlock) {
  const TurnFormat after{ToolCallFormat::hermes, true, ThinkStart::after};
  const ParsedTurn t = parse_tool_turn("Hello!", after);
  EXPECT_EQ(t.content, "Hello!");
  EXPECT_EQ(t.reasoning, "");
  const char* turn =
      "<think>x</think> <tool_call>\n{\"name\": \"w\", \"arguments\": {}}\n</tool_call>";
  const ParsedTurn u = parse_tool_turn(turn, after);
  EXPECT_EQ(u.reasoning, "");
  EXPECT_EQ(u.content, "<think>x</think>");
  ASSERT_EQ(u.calls.size(), 1u);
  expect_split_invariant(turn, after);
}

TEST(ToolCallStream, FormatFromTemplateText) {
  EXPECT_EQ(tool_call_format_from_template_text("{{ '[TOOL_CALLS]' + tool_calls|tojson }}"),
            ToolCallFormat::mistral);
  EXPECT_EQ(tool_call_format_from_template_text("<tool_call>\\n{{ tool_call | tojson }}"),
            ToolCallFormat::hermes);
  EXPECT_EQ(tool_call_format_from_template_text("{{- '<|python_tag|>' + ... }}"),
            ToolCallFormat::json_turn);
  EXPECT_EQ(tool_call_format_from_template_text("{\"name\": ..., \"parameters\": ...}"),
            ToolCallFormat::json_turn);
  EXPECT_EQ(tool_call_format_from_template_text("{{ message.content }}"), ToolCallFormat::hermes);
  EXPECT_TRUE(template_has_reasoning("{%- if '</think>' in content %}"));
  EXPECT_FALSE(template_has_reasoning("{{ message.content }}"));
  EXPECT_EQ(turn_markers(kMistral).front(), "[TOOL_CALLS]");
}

}  // namespace
}  // namespace infercept
