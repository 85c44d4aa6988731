// The nesting depth of JSON text, measured before anything parses it. Every JSON writer we
// use (nlohmann's serializer, the chat templates' Python-style printer) recurses once per
// level, so a body of 100,000 '[' would overflow the stack; and the llama3 template indents
// each level, so its output grows with the square of the depth. Text from outside (request
// bodies, tool arguments and schemas, tool results, model output) is checked with
// json_depth_ok first and refused past kMaxJsonDepth; below that every recursion is bounded.
#pragma once

#include <string_view>

namespace infercept {

// Deep enough for any real tool schema or arguments (they nest a few levels), shallow enough
// that a recursive writer uses a few KB of stack.
inline constexpr int kMaxJsonDepth = 128;

// The deepest nesting of '[' and '{' outside string literals, counting stops at stop_after + 1
// (the scan is linear and ends there). Malformed text is scanned all the same: the parser
// that runs next reports what is wrong with it.
int json_nesting_depth(std::string_view text, int stop_after = kMaxJsonDepth);

inline bool json_depth_ok(std::string_view text, int max_depth = kMaxJsonDepth) {
  return json_nesting_depth(text, max_depth) <= max_depth;
}

}  // namespace infercept
