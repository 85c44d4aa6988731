#include "engine/tool_call.h"

#include <nlohmann/json.hpp>

#include "core/json_depth.h"

namespace infercept {

namespace {
std::optional<ParsedToolCall> from_json_text(const std::string& text, const char* args_key) {
  if (!json_depth_ok(text)) return std::nullopt;
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  ParsedToolCall c;
  c.name = j["name"].get<std::string>();
  c.arguments_json = j.contains(args_key) ? j[args_key].dump() : "{}";
  return c;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}
}  // namespace

std::optional<ParsedToolCall> find_hermes_tool_call(const std::string& text) {
  const std::string open = "<tool_call>", close = "</tool_call>";
  const size_t a = text.find(open);
  if (a == std::string::npos) return std::nullopt;
  const size_t b = text.find(close, a + open.size());
  if (b == std::string::npos) return std::nullopt;
  const std::string body = trim(text.substr(a + open.size(), b - a - open.size()));
  if (auto c = from_json_text(body, "arguments")) return c;
  return ParsedToolCall{"tool", "{}"};
}

std::optional<ParsedToolCall> parse_json_tool_call(const std::string& text) {
  std::string t = trim(text);
  const std::string tag = "<|python_tag|>";
  if (t.rfind(tag, 0) == 0) t = trim(t.substr(tag.size()));
  if (t.empty() || t.front() != '{') return std::nullopt;
  return from_json_text(t, "parameters");
}

}  // namespace infercept
