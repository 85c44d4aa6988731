#include "grammar/example_tools.h"

#include "core/check.h"

namespace infercept::grammar {

const std::vector<ExampleTool>& example_tools() {
  static const std::vector<ExampleTool> tools = [] {
    using nlohmann::json;
    std::vector<ExampleTool> t;
    t.push_back({"get_weather", json::parse(R"({"type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city"], "additionalProperties": false})")});
    t.push_back({"plan_event", json::parse(R"({"type": "object",
        "properties": {"title": {"type": "string"}, "remote": {"type": "boolean"},
        "attendees": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "role": {"enum": ["host", "guest"]}},
        "required": ["name", "role"], "additionalProperties": false}}, "day": {"type": "integer"}},
        "required": ["title", "attendees"], "additionalProperties": false})")});
    t.push_back({"web_search", json::parse(R"({"type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"]})")});
    t.push_back({"book_table", json::parse(R"({"type": "object",
        "properties": {"restaurant": {"type": "string"}, "email": {"type": "string",
        "pattern": "^\\S+@\\S+$"}, "date": {"type": "string",
        "pattern": "^\\d{4}-\\d{2}-\\d{2}$"}, "hour": {"type": "integer", "minimum": 0,
        "maximum": 23}, "party_size": {"type": "integer", "minimum": 1, "maximum": 20},
        "budget": {"type": "number", "exclusiveMinimum": 0, "maximum": 5000}},
        "required": ["restaurant", "date", "hour", "party_size"], "additionalProperties": false})")});
    return t;
  }();
  return tools;
}

std::vector<ToolSpec> example_tool_specs(size_t n) {
  const std::vector<ExampleTool>& all = example_tools();
  CHECK(n <= all.size());
  std::vector<ToolSpec> specs;
  for (size_t i = 0; i < n; ++i) specs.push_back({all[i].name, &all[i].parameters, false});
  return specs;
}

}  // namespace infercept::grammar
