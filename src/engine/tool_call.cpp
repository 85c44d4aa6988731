#include "engine/tool_call.h"

#include <nlohmann/json.hpp>

#include "core/json_depth.h"

namespace infercept {

namespace {

using ojson = nlohmann::ordered_json;

const std::string kOpen = "<tool_call>";
const std::string kClose = "</tool_call>";
const std::string kPythonTag = "<|python_tag|>";
const char* const kSpace = " \t\r\n";

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string::npos) return {};
  const size_t e = s.find_last_not_of(kSpace);
  return s.substr(b, e - b + 1);
}

std::string rtrim(const std::string& s) {
  const size_t e = s.find_last_not_of(kSpace);
  return e == std::string::npos ? std::string() : s.substr(0, e + 1);
}

// {"name": ..., <arguments>} as a call, or nothing when it is not one. The arguments are
// under the format's own key (Hermes "arguments", JSON turn "parameters") or the other one;
// they keep the model's key order.
std::optional<ParsedToolCall> call_from_json(const std::string& body, ToolCallFormat format) {
  // Model output: as deep as its tokens let it be, so bounded like a request body.
  if (!json_depth_ok(body)) return std::nullopt;
  const ojson j = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  ParsedToolCall c;
  c.name = name->get<std::string>();
  const bool hermes = format == ToolCallFormat::hermes;
  auto args = j.find(hermes ? "arguments" : "parameters");
  if (args == j.end()) args = j.find(hermes ? "parameters" : "arguments");
  if (args == j.end() || args->is_null())
    c.arguments_json = "{}";
  else if (args->is_string())
    c.arguments_json = args->get<std::string>();
  else
    c.arguments_json = args->dump(-1, ' ', false, ojson::error_handler_t::replace);
  return c;
}

ParsedTurn parse_hermes_turn(const std::string& text) {
  ParsedTurn turn;
  std::string outside;  // the text around the calls
  size_t pos = 0;       // text before pos is in `outside` or a call
  size_t search = 0;    // where the next opening tag is looked for
  while (true) {
    const size_t a = text.find(kOpen, search);
    if (a == std::string::npos) break;
    const size_t b = text.find(kClose, a + kOpen.size());
    // A turn may end right after the JSON without the closing tag: that is a call too.
    const size_t body_end = b == std::string::npos ? text.size() : b;
    auto call = call_from_json(trim(text.substr(a + kOpen.size(), body_end - a - kOpen.size())),
                               ToolCallFormat::hermes);
    if (!call) {
      search = a + kOpen.size();  // a malformed block is text: look past its opening
      continue;
    }
    outside += text.substr(pos, a - pos);
    turn.calls.push_back(std::move(*call));
    pos = b == std::string::npos ? text.size() : b + kClose.size();
    search = pos;
  }
  if (turn.calls.empty()) {
    turn.content = text;
    return turn;
  }
  outside += text.substr(pos);
  turn.content = rtrim(outside);
  return turn;
}

// The whole turn is one call, or several, one per line.
ParsedTurn parse_json_turn(const std::string& text) {
  ParsedTurn turn;
  std::string t = trim(text);
  if (t.rfind(kPythonTag, 0) == 0) t = trim(t.substr(kPythonTag.size()));
  if (t.empty() || t.front() != '{') {
    turn.content = text;
    return turn;
  }
  if (auto c = call_from_json(t, ToolCallFormat::json_turn)) {
    turn.calls.push_back(std::move(*c));
    return turn;
  }
  for (size_t start = 0; start < t.size();) {
    size_t nl = t.find('\n', start);
    if (nl == std::string::npos) nl = t.size();
    const std::string line = trim(t.substr(start, nl - start));
    start = nl + 1;
    if (line.empty()) continue;
    auto c = call_from_json(line, ToolCallFormat::json_turn);
    if (!c) {
      turn.calls.clear();  // one line that is not a call: the turn is text
      break;
    }
    turn.calls.push_back(std::move(*c));
  }
  if (turn.calls.empty()) turn.content = text;
  return turn;
}

}  // namespace

ToolCallFormat tool_call_format(ChatTemplateKind kind) {
  return kind == ChatTemplateKind::chatml ? ToolCallFormat::hermes : ToolCallFormat::json_turn;
}

ToolCallFormat tool_call_format_of(const ChatTemplate& t) {
  return tool_call_format(t.kind);
}

ParsedTurn parse_tool_turn(const std::string& text, ToolCallFormat format) {
  return format == ToolCallFormat::hermes ? parse_hermes_turn(text) : parse_json_turn(text);
}

std::optional<ParsedToolCall> find_hermes_tool_call(const std::string& text) {
  for (size_t search = 0;;) {
    const size_t a = text.find(kOpen, search);
    if (a == std::string::npos) return std::nullopt;
    const size_t b = text.find(kClose, a + kOpen.size());
    if (b == std::string::npos) return std::nullopt;  // not complete yet
    auto call = call_from_json(trim(text.substr(a + kOpen.size(), b - a - kOpen.size())),
                               ToolCallFormat::hermes);
    if (call) return call;
    search = a + kOpen.size();  // as parse_tool_turn: a malformed block is text
  }
}

std::optional<ParsedToolCall> parse_json_tool_call(const std::string& text) {
  ParsedTurn turn = parse_json_turn(text);
  if (turn.calls.empty()) return std::nullopt;
  return std::move(turn.calls.front());
}

}  // namespace infercept
