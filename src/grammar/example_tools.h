// Four tool schemas shaped like real agents' tools, the benchmarks' typical tools
// (bench/bench_token_mask.cpp, `infercept bench-decode --constrained`): a flat one with an
// enum (get_weather), nested objects in an array (plan_event), one open to extra properties
// (web_search), and one with numeric bounds and patterns (book_table).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/tool_grammar.h"

namespace infercept::grammar {

struct ExampleTool {
  std::string name;
  nlohmann::json parameters;  // JSON Schema
};

const std::vector<ExampleTool>& example_tools();

// The first n of them as ToolSpecs (pointing into example_tools()).
std::vector<ToolSpec> example_tool_specs(size_t n);

}  // namespace infercept::grammar
