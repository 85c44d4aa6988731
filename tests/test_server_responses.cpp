// The Responses API's pieces that need no model (server/responses_api.h): a Responses request
// as the chat body the chat path parses (input items as messages, an assistant message and its
// function_call items one turn, tools flattened and back, text.format, what is refused and
// with which param), the Response object, and the stream's events from chat deltas (every item
// opened, filled and closed in order, numbered, the final output the items as streamed), and
// the store behind previous_response_id (per owner, bounded, the oldest dropped first).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/openai_protocol.h"
#include "server/response_store.h"
#include "server/responses_api.h"

namespace infercept::server {
namespace {

json chat_of(const json& body) {
  json chat;
  auto e = responses_to_chat_body(body, nullptr, chat);
  EXPECT_FALSE(e.has_value()) << (e ? e->message : "");
  return chat;
}

ApiError error_of(const json& body) {
  json chat;
  auto e = responses_to_chat_body(body, nullptr, chat);
  EXPECT_TRUE(e.has_value()) << body.dump();
  return e.value_or(ApiError{});
}

const json kWeather = {{"type", "function"},
                       {"name", "get_weather"},
                       {"description", "Get the weather"},
                       {"parameters", {{"type", "object"}}},
                       {"strict", true}};

TEST(ResponsesRequest, AStringInputIsOneUserMessageAfterTheInstructions) {
  const json chat = chat_of({{"model", "m"}, {"instructions", "Be brief."}, {"input", "Hi"}});
  ASSERT_EQ(chat["messages"].size(), 2u);
  EXPECT_EQ(chat["messages"][0], json({{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(chat["messages"][1], json({{"role", "user"}, {"content", "Hi"}}));
  EXPECT_EQ(chat["model"], "m");
}

TEST(ResponsesRequest, AnAssistantMessageAndItsCallsAreOneTurnAndOutputsAreToolMessages) {
  // What the Agents SDK sends back after a turn with text and two calls.
  const json input = json::array(
      {{{"role", "user"}, {"content", "Weather in Paris and Rome?"}},
       {{"type", "reasoning"},
        {"id", "rs_1"},
        {"summary", json::array()},
        {"content", json::array({{{"type", "reasoning_text"}, {"text", "Two cities."}}})}},
       {{"type", "message"},
        {"id", "msg_1"},
        {"role", "assistant"},
        {"status", "completed"},
        {"content", json::array({{{"type", "output_text"},
                                  {"text", "Let me look."},
                                  {"annotations", json::array()}}})}},
       {{"type", "function_call"},
        {"id", "fc_1"},
        {"call_id", "call_a"},
        {"name", "get_weather"},
        {"arguments", "{\"city\":\"Paris\"}"}},
       {{"type", "function_call"},
        {"call_id", "call_b"},
        {"name", "get_weather"},
        {"arguments", "{\"city\":\"Rome\"}"}},
       {{"type", "function_call_output"}, {"call_id", "call_a"}, {"output", "20 C"}},
       {{"type", "function_call_output"},
        {"call_id", "call_b"},
        {"output", json::array({{{"type", "input_text"}, {"text", "25 C"}}})}}});
  const json chat = chat_of({{"model", "m"}, {"input", input}});
  const json& msgs = chat["messages"];
  ASSERT_EQ(msgs.size(), 4u) << msgs.dump();
  EXPECT_EQ(msgs[1]["role"], "assistant");
  EXPECT_EQ(msgs[1]["content"], "Let me look.");
  EXPECT_EQ(msgs[1]["reasoning_content"], "Two cities.");
  ASSERT_EQ(msgs[1]["tool_calls"].size(), 2u);
  EXPECT_EQ(msgs[1]["tool_calls"][0],
            json({{"id", "call_a"},
                  {"type", "function"},
                  {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\"}"}}}}));
  EXPECT_EQ(msgs[1]["tool_calls"][1]["id"], "call_b");
  EXPECT_EQ(msgs[2], json({{"role", "tool"}, {"tool_call_id", "call_a"}, {"content", "20 C"}}));
  EXPECT_EQ(msgs[3], json({{"role", "tool"}, {"tool_call_id", "call_b"}, {"content", "25 C"}}));
}

TEST(ResponsesRequest, APreviousResponsesConversationGoesAfterTheInstructionsBeforeTheInput) {
  // The stored conversation of a turn that ended in a call; the follow-up sends its output.
  const json prior = json::array(
      {{{"role", "user"}, {"content", "Paris?"}},
       chat_message_json(ChatMessage{
           .role = "assistant",
           .tool_calls = {ToolCall{"call_a", "get_weather", "{\"city\":\"Paris\"}"}}})});
  json chat;
  const json body = {
      {"model", "m"},
      {"instructions", "New rules."},
      {"previous_response_id", "resp_1"},
      {"input",
       json::array(
           {{{"type", "function_call_output"}, {"call_id", "call_a"}, {"output", "20 C"}}})}};
  ASSERT_FALSE(responses_to_chat_body(body, &prior, chat).has_value());
  const json& msgs = chat["messages"];
  ASSERT_EQ(msgs.size(), 4u) << msgs.dump();
  EXPECT_EQ(msgs[0]["content"], "New rules.");
  EXPECT_EQ(msgs[1], prior[0]);
  EXPECT_TRUE(msgs[2]["content"].is_null());
  EXPECT_EQ(msgs[2]["tool_calls"][0]["id"], "call_a");
  EXPECT_EQ(msgs[3]["tool_call_id"], "call_a");
  EXPECT_EQ(instruction_messages(body), 1u);
  EXPECT_TRUE(responses_store_requested(body));
  EXPECT_TRUE(responses_store_requested({{"store", nullptr}}));
  EXPECT_FALSE(responses_store_requested({{"store", false}}));
  EXPECT_EQ(instruction_messages({{"input", "x"}}), 0u);
  // An input that adds nothing is refused, prior or not.
  EXPECT_TRUE(responses_to_chat_body({{"model", "m"}, {"input", json::array()}}, &prior, chat));
}

TEST(ResponseStore, PerOwnerBoundedTheOldestDroppedFirst) {
  auto stored = [](const std::string& text) {
    return ResponseStore::Stored{json::array({{{"role", "user"}, {"content", text}}}),
                                 {{"id", "r"}}};
  };
  const std::string kb(1000, 'x');
  ResponseStore store(3500);  // three entries of ~1 KB fit, four do not
  store.put("alice", "resp_1", stored(kb));
  store.put("alice", "resp_2", stored(kb));
  store.put("bob", "resp_3", stored(kb));
  EXPECT_EQ(store.size(), 3u);
  ASSERT_TRUE(store.get("alice", "resp_1").has_value());
  EXPECT_EQ(store.get("alice", "resp_1")->messages[0]["content"], kb);
  EXPECT_FALSE(store.get("bob", "resp_1").has_value()) << "another owner's";
  store.put("alice", "resp_4", stored(kb));
  EXPECT_FALSE(store.get("alice", "resp_1").has_value()) << "the oldest goes first";
  EXPECT_TRUE(store.get("alice", "resp_2").has_value());
  EXPECT_LE(store.bytes(), 3500u);
  EXPECT_FALSE(store.erase("bob", "resp_2"));
  EXPECT_TRUE(store.erase("alice", "resp_2"));
  EXPECT_FALSE(store.get("alice", "resp_2").has_value());
  EXPECT_EQ(store.size(), 2u);
  store.put("alice", "resp_5", stored(std::string(5000, 'y')));  // larger than the budget
  EXPECT_FALSE(store.get("alice", "resp_5").has_value());
  EXPECT_EQ(store.size(), 2u);
  // Many erased out of order, many put: what is kept stays within the budget and findable.
  for (int i = 0; i < 500; ++i) {
    store.put("alice", "r" + std::to_string(i), stored("a"));
    if (i % 2 == 0) store.erase("alice", "r" + std::to_string(i));
  }
  EXPECT_TRUE(store.get("alice", "r499").has_value());
  EXPECT_LE(store.bytes(), 3500u);
}

TEST(ResponsesRequest, CallsWithoutTextAreAnAssistantTurnWithNullContent) {
  const json chat = chat_of(
      {{"model", "m"},
       {"input",
        json::array({{{"role", "user"}, {"content", "Paris?"}},
                     {{"type", "function_call"},
                      {"call_id", "c1"},
                      {"name", "get_weather"},
                      {"arguments", "{}"}},
                     {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "ok"}},
                     {{"role", "user"}, {"content", "And Rome?"}}})}});
  const json& msgs = chat["messages"];
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_TRUE(msgs[1]["content"].is_null());
  EXPECT_EQ(msgs[1]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(msgs[3]["role"], "user");
}

TEST(ResponsesRequest, ToolsToolChoiceFormatAndSettingsBecomeTheirChatForms) {
  const json chat = chat_of({{"model", "m"},
                             {"input", "x"},
                             {"tools", json::array({kWeather})},
                             {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}},
                             {"text",
                              {{"format",
                                {{"type", "json_schema"},
                                 {"name", "out"},
                                 {"schema", {{"type", "object"}}},
                                 {"strict", true}}}}},
                             {"max_output_tokens", 50},
                             {"temperature", 0.5},
                             {"parallel_tool_calls", false},
                             {"prompt_cache_key", "k"},
                             {"stream", true},
                             {"store", false},
                             {"include", json::array({"reasoning.encrypted_content"})},
                             {"metadata", {{"a", "b"}}},
                             {"truncation", "disabled"}});
  EXPECT_EQ(chat["tools"][0], json({{"type", "function"},
                                    {"function",
                                     {{"name", "get_weather"},
                                      {"description", "Get the weather"},
                                      {"parameters", {{"type", "object"}}},
                                      {"strict", true}}}}));
  EXPECT_EQ(chat["tool_choice"],
            json({{"type", "function"}, {"function", {{"name", "get_weather"}}}}));
  EXPECT_EQ(chat["response_format"],
            json({{"type", "json_schema"},
                  {"json_schema",
                   {{"name", "out"}, {"schema", {{"type", "object"}}}, {"strict", true}}}}));
  EXPECT_EQ(chat["max_completion_tokens"], 50);
  EXPECT_EQ(chat["temperature"], 0.5);
  EXPECT_EQ(chat["parallel_tool_calls"], false);
  EXPECT_EQ(chat["prompt_cache_key"], "k");
  EXPECT_EQ(chat["stream"], true);
  for (const char* ignored : {"store", "include", "metadata", "truncation", "text"})
    EXPECT_FALSE(chat.contains(ignored)) << ignored;
  // The chat parser takes it as it is.
  ChatRequest cr;
  RequestLimits limits;
  limits.context = 4096;
  auto e = parse_chat_request(chat, limits, cr);
  ASSERT_FALSE(e.has_value()) << e->message;
  EXPECT_EQ(cr.tool_choice, ToolChoice::named);
  EXPECT_EQ(cr.params.max_tokens, 50);
  EXPECT_EQ(cr.response_format.kind, ResponseFormat::Kind::json_schema);
  EXPECT_FALSE(cr.parallel_tool_calls);
}

TEST(ResponsesRequest, WhatNeedsStateOrOtherToolsIsRefusedNamingTheParameter) {
  struct Case {
    json body;
    std::string param;
  };
  const std::vector<Case> cases = {
      {{{"model", "m"}, {"input", "x"}, {"conversation", "conv_1"}}, "conversation"},
      {{{"model", "m"}, {"input", "x"}, {"background", true}}, "background"},
      {{{"model", "m"}, {"input", "x"}, {"background", "yes"}}, "background"},
      {{{"model", "m"}, {"input", "x"}, {"store", "yes"}}, "store"},
      {{{"model", "m"}, {"input", "x"}, {"tools", json::array({{{"type", "web_search"}}})}},
       "tools[0].type"},
      {{{"model", "m"}}, "input"},
      {{{"model", "m"}, {"input", 3}}, "input"},
      {{{"model", "m"}, {"input", json::array()}}, "input"},
      {{{"model", "m"},
        {"input", json::array({{{"role", "user"},
                                {"content", json::array({{{"type", "input_image"},
                                                          {"image_url", "http://x"}}})}}})}},
       "input[0].content[0].type"},
      {{{"model", "m"}, {"input", json::array({{{"type", "item_reference"}, {"id", "x"}}})}},
       "input[0].type"},
      {{{"model", "m"},
        {"input", json::array({{{"type", "function_call_output"}, {"output", "x"}}})}},
       "input[0].call_id"},
      {{{"model", "m"}, {"input", json::array({{{"role", "critic"}, {"content", "x"}}})}},
       "input[0].role"},
      {{{"model", "m"}, {"input", "x"}, {"tool_choice", {{"type", "file_search"}}}},
       "tool_choice.type"},
      {{{"model", "m"}, {"input", "x"}, {"text", {{"format", {{"type", "grammar"}}}}}},
       "text.format.type"},
  };
  for (const Case& c : cases) {
    const ApiError e = error_of(c.body);
    EXPECT_EQ(e.status, 400) << c.body.dump();
    EXPECT_EQ(e.param, c.param) << c.body.dump() << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(ResponsesObject, OutputItemsUsageAndTheRequestEchoed) {
  ToolCall call{"call_x", "get_weather", "{\"city\":\"Paris\"}"};
  const json items = response_output_items("Looking.", "Think.", {call});
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0]["type"], "reasoning");
  EXPECT_EQ(items[0]["content"][0]["text"], "Think.");
  EXPECT_EQ(items[1]["type"], "message");
  EXPECT_EQ(items[1]["content"][0]["text"], "Looking.");
  EXPECT_EQ(items[2]["type"], "function_call");
  EXPECT_EQ(items[2]["call_id"], "call_x");
  EXPECT_EQ(items[2]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_TRUE(items[2]["id"].get<std::string>().starts_with("fc_"));
  // A turn that is only calls has no message; one with neither has an empty message.
  EXPECT_EQ(response_output_items("", "", {call}).size(), 1u);
  EXPECT_EQ(response_output_items("", "", {})[0]["type"], "message");

  ResponseHeader h{"resp_1", 7, "m", {{"instructions", "Be brief."}, {"max_output_tokens", 9}}};
  const json r = response_object(h, "incomplete", items, responses_usage(100, 9, 64));
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r["instructions"], "Be brief.");
  EXPECT_EQ(r["max_output_tokens"], 9);
  EXPECT_FALSE(r.contains("output_text")) << "the SDKs' own convenience, not on the wire";
  EXPECT_EQ(r["usage"]["input_tokens"], 100);
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 64);
  EXPECT_EQ(r["usage"]["total_tokens"], 109);
  EXPECT_TRUE(response_object(h, "completed", items, nullptr)["incomplete_details"].is_null());
}

// The stream's events, parsed back: "event: T\ndata: {...}\n\n" each.
std::vector<json> events_of(const std::string& sse) {
  std::vector<json> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    const std::string ev = sse.substr(pos, end - pos);
    const size_t nl = ev.find('\n');
    EXPECT_EQ(ev.substr(0, 7), "event: ");
    EXPECT_EQ(ev.substr(nl + 1, 6), "data: ");
    json data = json::parse(ev.substr(nl + 7));
    EXPECT_EQ(data["type"], ev.substr(7, nl - 7));
    out.push_back(std::move(data));
    pos = end + 2;
  }
  return out;
}

TEST(ResponsesStream, ChatDeltasBecomeItemsOpenedFilledAndClosedInOrder) {
  ResponsesStream s(ResponseHeader{"resp_1", 7, "m", json::object()});
  std::string sse = s.start();
  sse += s.delta({{"reasoning_content", "Hm"}});
  sse += s.delta({{"reasoning_content", "m."}});
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
  // A held call arrives whole at the end.
  sse += s.delta({{"tool_calls",
                   json::array({{{"index", 1},
                                 {"id", "call_b"},
                                 {"type", "function"},
                                 {"function", {{"name", "calc"}, {"arguments", "{\"x\":1}"}}}}})}});
  sse += s.finish("completed", responses_usage(10, 5, 0), {{"interception", {{"id", "icpt_1"}}}});
  const std::vector<json> ev = events_of(sse);
  std::vector<std::string> types;
  for (size_t i = 0; i < ev.size(); ++i) {
    types.push_back(ev[i]["type"]);
    EXPECT_EQ(ev[i]["sequence_number"], (int64_t)i);
  }
  const std::vector<std::string> want = {
      "response.created", "response.in_progress",
      // reasoning
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
      "response.output_item.done",
      // message
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done",
      // call a
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.delta", "response.function_call_arguments.done",
      "response.output_item.done",
      // call b, whole
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done", "response.completed"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(ev[0]["response"]["status"], "in_progress");
  EXPECT_EQ(ev[13]["text"], "Let me look.");
  EXPECT_EQ(ev[13]["output_index"], 1);
  EXPECT_EQ(ev[19]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(ev[20]["item"]["call_id"], "call_a");
  EXPECT_EQ(ev[20]["item"]["status"], "completed");
  EXPECT_EQ(ev[20]["output_index"], 2);
  const json& done = ev.back()["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["interception"]["id"], "icpt_1");
  EXPECT_EQ(done["usage"]["output_tokens"], 5);
  ASSERT_EQ(done["output"].size(), 4u);
  // The final output is the items as streamed: the same ids.
  EXPECT_EQ(done["output"][1]["id"], ev[9]["item"]["id"]);
  EXPECT_EQ(done["output"][1]["content"][0]["text"], "Let me look.");
  EXPECT_EQ(done["output"][3]["arguments"], "{\"x\":1}");
}

TEST(ResponsesStream, AnEmptyTurnStillAnswersWithAMessageAndErrorsAreEvents) {
  ResponsesStream s(ResponseHeader{"resp_1", 7, "m", json::object()});
  std::string sse = s.start() + s.delta({{"content", ""}});
  sse += s.finish("incomplete", responses_usage(3, 0, 0), nullptr);
  const std::vector<json> ev = events_of(sse);
  EXPECT_EQ(ev.back()["type"], "response.incomplete");
  EXPECT_EQ(ev.back()["response"]["output"].size(), 1u);
  EXPECT_EQ(ev.back()["response"]["output"][0]["type"], "message");
  ResponsesStream t(ResponseHeader{"resp_2", 7, "m", json::object()});
  const std::vector<json> err = events_of(t.start() + t.error(invalid_request("bad", "input")));
  EXPECT_EQ(err.back()["type"], "error");
  EXPECT_EQ(err.back()["message"], "bad");
  EXPECT_EQ(err.back()["param"], "input");
}

}  // namespace
}  // namespace infercept::server
