// The server's pieces that need no model: a turn read into OpenAI tool calls (the engine's
// parser, so a malformed call is text here too), the streaming filter, the chunks and their
// event framing, /metrics numbers, histogram quantiles, and the dashboard's key page.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "server/dashboard.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/tool_parser.h"

namespace infercept::server {
namespace {

// What a client of the stream sees as content: everything the filter let out as the turn
// came, then the rest of the final content.
std::string streamed_content(const std::string& turn, ChatTemplateKind kind, size_t piece) {
  ToolTextFilter f(kind, true);
  std::string out;
  for (size_t i = 0; i < turn.size(); i += piece) out += f.push(turn.substr(i, piece));
  const AssistantTurn t = parse_assistant_turn(turn, kind);
  return out + (t.content.size() > f.emitted() ? t.content.substr(f.emitted()) : "");
}

TEST(ServerToolParser, CallsGetIdsAndContentIsTheRest) {
  const AssistantTurn t = parse_assistant_turn(
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>",
      ChatTemplateKind::chatml);
  ASSERT_EQ(t.calls.size(), 1u);
  EXPECT_EQ(t.calls[0].name, "get_weather");
  EXPECT_EQ(t.calls[0].arguments_json, "{\"city\":\"Paris\"}");
  EXPECT_EQ(t.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(t.content, "Let me look.");
}

// The one rule, as the server applies it: a malformed call is content, verbatim, and the
// stream delivers the same content as the whole answer.
TEST(ServerToolParser, MalformedHermesCallIsContentStreamedOrNot) {
  for (const std::string& turn :
       {std::string("Sure.\n<tool_call>\nnot json\n</tool_call>"),
        std::string("<tool_call>\n{\"name\": 7}\n</tool_call>"),
        std::string("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci")}) {
    const AssistantTurn t = parse_assistant_turn(turn, ChatTemplateKind::chatml);
    EXPECT_TRUE(t.calls.empty()) << turn;
    EXPECT_EQ(t.content, turn);
    for (size_t piece : {1, 3, 64})
      EXPECT_EQ(streamed_content(turn, ChatTemplateKind::chatml, piece), turn) << piece;
  }
  // A malformed block and a call: the call is a call, the block stays in the content.
  const std::string mixed =
      "A <tool_call>oops</tool_call> B\n<tool_call>{\"name\": \"f\"}</tool_call>";
  const AssistantTurn t = parse_assistant_turn(mixed, ChatTemplateKind::chatml);
  ASSERT_EQ(t.calls.size(), 1u);
  EXPECT_EQ(t.calls[0].name, "f");
  EXPECT_EQ(t.content, "A <tool_call>oops</tool_call> B");
  EXPECT_EQ(streamed_content(mixed, ChatTemplateKind::chatml, 2), t.content);
}

TEST(ServerToolParser, MalformedJsonTurnIsContentStreamedOrNot) {
  for (const std::string& turn : {std::string("{\"name\": \"f\", \"parameters\": {\"x\": 1}"),
                                  std::string("<|python_tag|>{\"nam\": \"f\"}"),
                                  std::string("{\"name\": \"f\"}\nnot a call")}) {
    const AssistantTurn t = parse_assistant_turn(turn, ChatTemplateKind::llama3);
    EXPECT_TRUE(t.calls.empty()) << turn;
    EXPECT_EQ(t.content, turn);
    EXPECT_EQ(streamed_content(turn, ChatTemplateKind::llama3, 4), turn);
  }
  const AssistantTurn ok = parse_assistant_turn(
      "{\"name\": \"f\", \"parameters\": {\"x\": 1}}\n{\"name\": \"g\", \"parameters\": {}}",
      ChatTemplateKind::llama3);
  ASSERT_EQ(ok.calls.size(), 2u);
  EXPECT_EQ(ok.calls[1].name, "g");
  EXPECT_EQ(ok.content, "");
}

TEST(ServerStream, ChunksAndEventFraming) {
  StreamHeader h{"chatcmpl-1", true, 1700000000, "m", false};
  EXPECT_EQ(sse_event(stream_chunk(h, chat_chunk_choice(chat_first_delta()))),
            "data: {\"choices\":[{\"delta\":{\"content\":\"\",\"role\":\"assistant\"},"
            "\"finish_reason\":null,\"index\":0,\"logprobs\":null}],\"created\":1700000000,"
            "\"id\":\"chatcmpl-1\",\"model\":\"m\",\"object\":\"chat.completion.chunk\"}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  h.include_usage = true;
  const json c = stream_chunk(h, chat_chunk_choice(json::object(), nullptr, "tool_calls"));
  EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
  EXPECT_EQ(c["choices"][0]["finish_reason"], "tool_calls");
  const json u = usage_chunk(h, usage_json(5, 2, 3));
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 7);
  EXPECT_EQ(u["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  const json d = tool_calls_delta({{"call_a", "f", "{}"}, {"call_b", "g", "{\"x\":1}"}});
  ASSERT_EQ(d["tool_calls"].size(), 2u);
  EXPECT_EQ(d["tool_calls"][1]["index"], 1);
  EXPECT_EQ(d["tool_calls"][1]["function"]["arguments"], "{\"x\":1}");
  h.chat = false;
  const json t = stream_chunk(h, completion_chunk_choice("hi", nullptr));
  EXPECT_EQ(t["object"], "text_completion");
  EXPECT_EQ(t["choices"][0]["text"], "hi");
  const json lp = completion_logprobs_json({{"ab", -0.5f, {}}, {"c", -1.0f, {}}}, 10);
  EXPECT_EQ(lp["text_offset"], json::array({10, 12}));
}

TEST(ServerMetrics, ValuesPrintInFull) {
  EXPECT_EQ(format_metric_value(20), "20");
  EXPECT_EQ(format_metric_value(10), "10");
  EXPECT_EQ(format_metric_value(1800), "1800");
  EXPECT_EQ(format_metric_value(123456789), "123456789");
  EXPECT_EQ(format_metric_value(0), "0");
  EXPECT_EQ(format_metric_value(-3), "-3");
  EXPECT_EQ(format_metric_value(0.25), "0.25");
  EXPECT_EQ(format_metric_value(0.001), "0.001");
  EXPECT_EQ(format_metric_value(2.5), "2.5");
  EXPECT_EQ(format_metric_value(0.1 + 0.2), "0.30000000000000004");  // reads back the same
  EXPECT_EQ(format_metric_value(12345.678), "12345.678");
  EXPECT_EQ(format_metric_value(0.0000123), "0.0000123");
  EXPECT_EQ(format_metric_value(1.0 / 0.0), "+Inf");
  EXPECT_EQ(format_metric_value(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(format_metric_value(0.0 / 0.0), "NaN");
  for (double v : {0.1, 1.0 / 3.0, 7.5, 42.0, 3.14159e5, 0.0625})
    EXPECT_EQ(std::stod(format_metric_value(v)), v) << v;
}

TEST(ServerMetrics, HistogramBucketEdgesPrintInFull) {
  Histogram h({0.5, 10.0, 20.0, 1800.0});
  h.observe(15.0);
  std::string out;
  h.render(out, "x", "tool=\"t\"");
  EXPECT_NE(out.find("x_bucket{tool=\"t\",le=\"10\"} 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{tool=\"t\",le=\"20\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("le=\"1800\""), std::string::npos) << out;
  EXPECT_NE(out.find("le=\"0.5\""), std::string::npos) << out;
  EXPECT_NE(out.find("le=\"+Inf\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_sum{tool=\"t\"} 15\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("e+"), std::string::npos) << out;
}

TEST(ServerMetrics, QuantilesAreInterpolatedWithinTheBucket) {
  Histogram h({1.0, 2.0, 5.0, 10.0});
  EXPECT_EQ(h.quantile(0.5), 0.0);             // empty
  for (int i = 0; i < 4; ++i) h.observe(3.0);  // all in (2, 5]
  // Rank 2 of 4 in a bucket from 2 to 5 holding all 4: halfway.
  EXPECT_DOUBLE_EQ(h.quantile(0.5), 3.5);
  EXPECT_DOUBLE_EQ(h.quantile(1.0), 5.0);
  EXPECT_DOUBLE_EQ(h.quantile(0.25), 2.75);
  Histogram g({1.0, 2.0, 5.0, 10.0});
  g.observe(0.5);  // (0, 1]
  g.observe(0.7);
  g.observe(1.5);                            // (1, 2]
  g.observe(8.0);                            // (5, 10]
  EXPECT_DOUBLE_EQ(g.quantile(0.25), 0.5);   // rank 1 of the 2 in (0, 1]
  EXPECT_DOUBLE_EQ(g.quantile(0.5), 1.0);    // rank 2: the top of (0, 1]
  EXPECT_DOUBLE_EQ(g.quantile(0.625), 1.5);  // rank 2.5: halfway through (1, 2]
  EXPECT_NEAR(g.quantile(0.95), 9.0, 1e-9);  // rank 3.8: 80% into (5, 10]
  Histogram inf({1.0, 2.0});
  inf.observe(100.0);
  EXPECT_DOUBLE_EQ(inf.quantile(0.5), 2.0);  // past the last bound: that bound
  // The dashboard's p50/p95 are these.
  const nlohmann::json j = g.to_json();
  EXPECT_DOUBLE_EQ(j["p50"].get<double>(), 1.0);
  EXPECT_NEAR(j["p95"].get<double>(), 9.0, 1e-9);
}

TEST(ServerDashboard, KeyPageSaysHowToPassAKey) {
  for (bool given : {false, true}) {
    const std::string page = dashboard_key_page(given);
    EXPECT_NE(page.find("<html"), std::string::npos);
    EXPECT_NE(page.find("?api_key="), std::string::npos);
    EXPECT_NE(page.find("Authorization: Bearer"), std::string::npos);
    EXPECT_NE(page.find("name=\"api_key\""), std::string::npos);  // the form
    EXPECT_NE(page.find(given ? "not accepted" : "No API key was given"), std::string::npos);
  }
}

}  // namespace
}  // namespace infercept::server
