// Anthropic's Messages API pieces that need no model (server/anthropic_api.h): a Messages
// request as the chat body the chat path parses (system, content blocks, tool_use and
// tool_result with their ids, tools and tool_choice), what is refused and with which param,
// the Message and its usage, errors in Anthropic's shape, and the stream's events from chat
// deltas (blocks opened, filled and closed in order).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/anthropic_api.h"
#include "server/openai_protocol.h"

namespace infercept::server {
namespace {

json chat_of(const json& body) {
  json chat;
  auto e = messages_to_chat_body(body, chat);
  EXPECT_FALSE(e.has_value()) << (e ? e->message : "");
  return chat;
}

const json kWeather = {{"name", "get_weather"},
                       {"description", "Get the weather"},
                       {"input_schema", {{"type", "object"}}}};

TEST(AnthropicRequest, SystemBlocksAndAToolRoundTripBecomeChatMessages) {
  // What Claude Code sends back after a turn with text and a call.
  const json body = {
      {"model", "m"},
      {"max_tokens", 100},
      {"system", json::array({{{"type", "text"},
                               {"text", "Be brief."},
                               {"cache_control", {{"type", "ephemeral"}}}}})},
      {"messages",
       json::array(
           {{{"role", "user"}, {"content", "Paris?"}},
            {{"role", "assistant"},
             {"content",
              json::array({{{"type", "thinking"}, {"thinking", "Hm."}, {"signature", "s"}},
                           {{"type", "text"}, {"text", "Let me look."}},
                           {{"type", "tool_use"},
                            {"id", "toolu_1"},
                            {"name", "get_weather"},
                            {"input", {{"city", "Paris"}}}}})}},
            {{"role", "user"},
             {"content",
              json::array({{{"type", "tool_result"},
                            {"tool_use_id", "toolu_1"},
                            {"content", json::array({{{"type", "text"}, {"text", "20 C"}}})}},
                           {{"type", "text"}, {"text", "And Rome?"}}})}}})}};
  const json chat = chat_of(body);
  const json& m = chat["messages"];
  ASSERT_EQ(m.size(), 5u) << m.dump();
  EXPECT_EQ(m[0], json({{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(m[1], json({{"role", "user"}, {"content", "Paris?"}}));
  EXPECT_EQ(m[2]["content"], "Let me look.");
  EXPECT_EQ(m[2]["reasoning_content"], "Hm.");
  EXPECT_EQ(m[2]["tool_calls"][0],
            json({{"id", "toolu_1"},
                  {"type", "function"},
                  {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\"}"}}}}));
  EXPECT_EQ(m[3], json({{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "20 C"}}));
  EXPECT_EQ(m[4], json({{"role", "user"}, {"content", "And Rome?"}}));
  EXPECT_EQ(chat["max_tokens"], 100);
}

TEST(AnthropicRequest, ToolsToolChoiceAndSettingsBecomeTheirChatForms) {
  json chat = chat_of({{"model", "m"},
                       {"max_tokens", 10},
                       {"messages", json::array({{{"role", "user"}, {"content", "x"}}})},
                       {"tools", json::array({kWeather})},
                       {"tool_choice", {{"type", "any"}, {"disable_parallel_tool_use", true}}},
                       {"stop_sequences", json::array({"END"})},
                       {"temperature", 0.2},
                       {"top_k", 5},
                       {"metadata", {{"user_id", "u"}}},
                       {"stream", true}});
  EXPECT_EQ(chat["tools"][0], json({{"type", "function"},
                                    {"function",
                                     {{"name", "get_weather"},
                                      {"description", "Get the weather"},
                                      {"parameters", {{"type", "object"}}}}}}));
  EXPECT_EQ(chat["tool_choice"], "required");
  EXPECT_EQ(chat["parallel_tool_calls"], false);
  EXPECT_EQ(chat["stop"], json::array({"END"}));
  EXPECT_EQ(chat["top_k"], 5);
  EXPECT_FALSE(chat.contains("metadata"));
  chat = chat_of({{"model", "m"},
                  {"max_tokens", 10},
                  {"messages", json::array({{{"role", "user"}, {"content", "x"}}})},
                  {"tools", json::array({kWeather})},
                  {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}}});
  EXPECT_EQ(chat["tool_choice"],
            json({{"type", "function"}, {"function", {{"name", "get_weather"}}}}));
  ChatRequest cr;
  RequestLimits limits;
  limits.context = 4096;
  auto e = parse_chat_request(chat, limits, cr);
  ASSERT_FALSE(e.has_value()) << e->message;
  EXPECT_EQ(cr.tool_choice, ToolChoice::named);
  EXPECT_EQ(cr.params.max_tokens, 10);
}

TEST(AnthropicRequest, WhatItCannotDoIsRefusedNamingTheParameter) {
  struct Case {
    json body;
    std::string param;
  };
  const json user = json::array({{{"role", "user"}, {"content", "x"}}});
  const std::vector<Case> cases = {
      {{{"model", "m"}, {"messages", user}}, "max_tokens"},
      {{{"model", "m"}, {"max_tokens", 5}}, "messages"},
      {{{"model", "m"}, {"max_tokens", 5}, {"messages", json::array()}}, "messages"},
      {{{"model", "m"},
        {"max_tokens", 5},
        {"messages", json::array({{{"role", "system"}, {"content", "x"}}})}},
       "messages[0].role"},
      {{{"model", "m"},
        {"max_tokens", 5},
        {"messages", json::array({{{"role", "user"},
                                   {"content", json::array({{{"type", "image"},
                                                             {"source", json::object()}}})}}})}},
       "messages[0].content[0].type"},
      {{{"model", "m"},
        {"max_tokens", 5},
        {"messages",
         json::array(
             {{{"role", "user"},
               {"content", json::array({{{"type", "tool_use"}, {"id", "a"}, {"name", "b"}}})}}})}},
       "messages[0].content[0].type"},
      {{{"model", "m"},
        {"max_tokens", 5},
        {"messages",
         json::array({{{"role", "user"},
                       {"content", json::array({{{"type", "tool_result"}, {"content", "x"}}})}}})}},
       "messages[0].content[0].tool_use_id"},
      {{{"model", "m"},
        {"max_tokens", 5},
        {"messages", user},
        {"tools", json::array({{{"type", "web_search_20250305"}, {"name", "web_search"}}})}},
       "tools[0].type"},
      {{{"model", "m"},
        {"max_tokens", 5},
        {"messages", user},
        {"tool_choice", {{"type", "sometimes"}}}},
       "tool_choice.type"},
      {{{"model", "m"}, {"max_tokens", 5}, {"messages", user}, {"system", 3}}, "system"},
  };
  for (const Case& c : cases) {
    json chat;
    auto e = messages_to_chat_body(c.body, chat);
    ASSERT_TRUE(e.has_value()) << c.body.dump();
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, c.param) << c.body.dump() << ": " << e->message;
  }
}

TEST(AnthropicMessage, ContentStopReasonsUsageAndErrors) {
  const json content = anthropic_content(
      "Looking.", "Think.", {ToolCall{"call_x", "get_weather", "{\"city\":\"Paris\"}"}});
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[0]["type"], "thinking");
  EXPECT_EQ(content[1], json({{"type", "text"}, {"text", "Looking."}}));
  EXPECT_EQ(content[2], json({{"type", "tool_use"},
                              {"id", "call_x"},
                              {"name", "get_weather"},
                              {"input", {{"city", "Paris"}}}}));
  EXPECT_EQ(anthropic_content("", "", {ToolCall{"c", "f", "not json"}})[0]["input"],
            json::object());
  EXPECT_EQ(anthropic_content("", "", {})[0]["type"], "text");
  EXPECT_EQ(anthropic_stop_reason("tool_calls"), "tool_use");
  EXPECT_EQ(anthropic_stop_reason("length"), "max_tokens");
  EXPECT_EQ(anthropic_stop_reason("stop"), "end_turn");
  const json u = anthropic_usage(100, 7, 64);
  EXPECT_EQ(u["input_tokens"], 36);
  EXPECT_EQ(u["cache_read_input_tokens"], 64);
  EXPECT_EQ(u["output_tokens"], 7);
  const json m = anthropic_message("msg_1", "m", content, "tool_use", u);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  const json err = anthropic_error_body(invalid_request("bad", "messages"));
  EXPECT_EQ(err, json({{"type", "error"},
                       {"error", {{"type", "invalid_request_error"}, {"message", "bad"}}}}));
  EXPECT_EQ(anthropic_error_body(not_found("gone"))["error"]["type"], "not_found_error");
}

std::vector<json> events_of(const std::string& sse) {
  std::vector<json> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    const std::string ev = sse.substr(pos, end - pos);
    const size_t nl = ev.find('\n');
    json data = json::parse(ev.substr(nl + 7));
    EXPECT_EQ(data["type"], ev.substr(7, nl - 7));
    out.push_back(std::move(data));
    pos = end + 2;
  }
  return out;
}

TEST(AnthropicStream, ChatDeltasBecomeBlocksOpenedFilledAndClosedInOrder) {
  AnthropicStream s("msg_1", "m");
  std::string sse = s.start(anthropic_usage(10, 0, 0));
  sse += s.delta({{"reasoning_content", "Hm."}});
  sse += s.delta({{"content", "Let "}});
  sse += s.delta({{"content", "me look."}});
  sse += s.delta({{"tool_calls",
                   json::array({{{"index", 0},
                                 {"id", "call_a"},
                                 {"type", "function"},
                                 {"function", {{"name", "get_weather"}, {"arguments", ""}}}}})}});
  sse += s.delta(
      {{"tool_calls", json::array({{{"index", 0}, {"function", {{"arguments", "{\"city\":"}}}}})}});
  sse += s.delta(
      {{"tool_calls", json::array({{{"index", 0}, {"function", {{"arguments", "\"Paris\"}"}}}}})}});
  sse += s.finish("tool_use", anthropic_usage(10, 5, 0), {{"interception", {{"id", "icpt_1"}}}});
  const std::vector<json> ev = events_of(sse);
  std::vector<std::string> types;
  for (const json& e : ev) types.push_back(e["type"]);
  const std::vector<std::string> want = {"message_start",       "content_block_start",
                                         "content_block_delta", "content_block_delta",
                                         "content_block_stop",  // thinking (+ signature)
                                         "content_block_start", "content_block_delta",
                                         "content_block_delta", "content_block_stop",  // text
                                         "content_block_start", "content_block_delta",
                                         "content_block_delta", "content_block_stop",  // tool_use
                                         "message_delta",       "message_stop"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(ev[0]["message"]["id"], "msg_1");
  EXPECT_EQ(ev[0]["message"]["content"], json::array());
  EXPECT_EQ(ev[1]["content_block"]["type"], "thinking");
  EXPECT_EQ(ev[2]["delta"], json({{"type", "thinking_delta"}, {"thinking", "Hm."}}));
  EXPECT_EQ(ev[5]["index"], 1);
  EXPECT_EQ(ev[6]["delta"], json({{"type", "text_delta"}, {"text", "Let "}}));
  EXPECT_EQ(ev[9]["content_block"], json({{"type", "tool_use"},
                                          {"id", "call_a"},
                                          {"name", "get_weather"},
                                          {"input", json::object()}}));
  EXPECT_EQ(ev[10]["delta"], json({{"type", "input_json_delta"}, {"partial_json", "{\"city\":"}}));
  EXPECT_EQ(ev[12]["index"], 2);
  EXPECT_EQ(ev[13]["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(ev[13]["usage"]["output_tokens"], 5);
  EXPECT_EQ(ev[13]["interception"]["id"], "icpt_1");
  // A turn with nothing to say still has its (empty) text block.
  AnthropicStream t("msg_2", "m");
  const std::vector<json> empty = events_of(
      t.start(anthropic_usage(1, 0, 0)) + t.finish("end_turn", anthropic_usage(1, 0, 0), nullptr));
  ASSERT_EQ(empty.size(), 5u);
  EXPECT_EQ(empty[1]["content_block"]["type"], "text");
  EXPECT_EQ(events_of(t.error(invalid_request("bad")))[0]["error"]["type"],
            "invalid_request_error");
}

}  // namespace
}  // namespace infercept::server
