// Tool-call recognition in generated text (the interception trigger of chat formats).
#include <gtest/gtest.h>

#include "engine/tool_call.h"

namespace infercept {
namespace {

TEST(ToolCall, HermesCompleteCallIsFoundWithNameAndArguments) {
  auto c = find_hermes_tool_call(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "get_weather");
  EXPECT_EQ(c->arguments_json, "{\"city\":\"Paris\"}");
}

TEST(ToolCall, HermesIncompleteOrAbsentIsNotACall) {
  EXPECT_FALSE(find_hermes_tool_call("<tool_call>{\"name\": \"x\""));
  EXPECT_FALSE(find_hermes_tool_call("no call here"));
  EXPECT_FALSE(find_hermes_tool_call("</tool_call> before <tool_call>"));
}

TEST(ToolCall, HermesMalformedBodyStillPauses) {
  auto c = find_hermes_tool_call("<tool_call>not json</tool_call>");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "tool");
}

TEST(ToolCall, Llama3JsonTurn) {
  auto c = parse_json_tool_call(
      " {\"name\": \"search\", \"parameters\": {\"q\": \"tallest mountain\"}} ");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "search");
  EXPECT_EQ(c->arguments_json, "{\"q\":\"tallest mountain\"}");
  auto p = parse_json_tool_call("<|python_tag|>{\"name\": \"calc\"}");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->name, "calc");
  EXPECT_EQ(p->arguments_json, "{}");
  EXPECT_FALSE(parse_json_tool_call("The answer is {\"name\": 1}"));
  EXPECT_FALSE(parse_json_tool_call("{\"parameters\": {}}"));
  EXPECT_FALSE(parse_json_tool_call("{\"name\": 42}"));
}

}  // namespace
}  // namespace infercept
