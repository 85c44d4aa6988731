#include "core/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace infercept {
namespace {

TEST(JsonDepth, CountsBracketsOutsideStrings) {
  EXPECT_EQ(json_nesting_depth("1"), 0);
  EXPECT_EQ(json_nesting_depth("{}"), 1);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}], "c": {}})"), 4);
  // Brackets inside strings, escaped quotes included, do not count.
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[{{{", "b": "\"[[[", "c": [0]})"), 2);
  EXPECT_EQ(json_nesting_depth(R"(["\\", [[]]])"), 3);
}

TEST(JsonDepth, StopsPastTheLimitAndRefusesDeepText) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(json_nesting_depth(deep, 10), 11);
  EXPECT_FALSE(json_depth_ok(deep));
  const std::string at_limit = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(json_depth_ok(at_limit));
  EXPECT_FALSE(json_depth_ok("[" + at_limit + "]"));
  // Sequential (not nested) arrays stay shallow however many there are.
  std::string wide = "[";
  for (int i = 0; i < 10000; ++i) wide += "[],";
  wide += "[]]";
  EXPECT_EQ(json_nesting_depth(wide), 2);
}

}  // namespace
}  // namespace infercept
