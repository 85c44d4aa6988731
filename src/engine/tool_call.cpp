#include "engine/tool_call.h"

#include <nlohmann/json.hpp>

#include "core/json_depth.h"
#include "engine/tool_call_stream.h"

namespace infercept {

namespace {

using ojson = nlohmann::ordered_json;

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// The end of the JSON string literal opening at s[i] ('"'), past its closing quote.
size_t string_end(std::string_view s, size_t i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\')
      ++i;
    else if (s[i] == '"')
      return i + 1;
  }
  return s.size();
}

// The end of the JSON value starting at s[i], in text already known to be valid JSON.
size_t value_end(std::string_view s, size_t i) {
  if (i >= s.size()) return i;
  if (s[i] == '"') return string_end(s, i);
  if (s[i] != '{' && s[i] != '[') {
    while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && !is_space(s[i])) ++i;
    return i;
  }
  int depth = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"') {
      i = string_end(s, i) - 1;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return s.size();
}

// The text of the first member of the valid JSON object `obj` whose key is written as one of
// `keys`, exactly as written; "" when there is none.
std::string_view raw_member(std::string_view obj, std::initializer_list<std::string_view> keys) {
  size_t i = skip_space(obj, 0) + 1;  // past '{'
  while (true) {
    i = skip_space(obj, i);
    if (i >= obj.size() || obj[i] != '"') return {};
    const size_t k_end = string_end(obj, i);
    const std::string_view key = obj.substr(i + 1, k_end - i - 2);
    i = skip_space(obj, k_end);
    if (i >= obj.size() || obj[i] != ':') return {};
    i = skip_space(obj, i + 1);
    const size_t v_end = value_end(obj, i);
    for (std::string_view k : keys)
      if (key == k) return obj.substr(i, v_end - i);
    i = skip_space(obj, v_end);
    if (i >= obj.size() || obj[i] != ',') return {};
    ++i;
  }
}

}  // namespace

std::optional<ParsedToolCall> tool_call_from_json(std::string_view body) {
  // Model output: as deep as its tokens let it be, so bounded like a request body.
  if (!json_depth_ok(body)) return std::nullopt;
  const ojson j = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  ParsedToolCall c;
  c.name = name->get<std::string>();
  auto args = j.end();
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() == "arguments" || it.key() == "parameters") {
      args = it;
      break;
    }
  if (args == j.end() || args->is_null()) {
    c.arguments_json = "{}";
  } else if (args->is_string()) {
    c.arguments_json = args->get<std::string>();
  } else {
    // As the model wrote it (a streamed call's pieces add up to this), else written out.
    const std::string_view raw = raw_member(body, {"arguments", "parameters"});
    c.arguments_json = !raw.empty() ? std::string(raw)
                                    : args->dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
  return c;
}

ToolCallFormat tool_call_format(ChatTemplateKind kind) {
  return kind == ChatTemplateKind::chatml ? ToolCallFormat::hermes : ToolCallFormat::json_turn;
}

ToolCallFormat tool_call_format_from_template_text(const std::string& text,
                                                   ToolCallFormat fallback) {
  if (text.find("[TOOL_CALLS]") != std::string::npos) return ToolCallFormat::mistral;
  if (text.find("<tool_call>") != std::string::npos) return ToolCallFormat::hermes;
  if (text.find("<|python_tag|>") != std::string::npos ||
      text.find("\"parameters\"") != std::string::npos ||
      text.find("'parameters'") != std::string::npos)
    return ToolCallFormat::json_turn;
  return fallback;
}

TurnFormat turn_format(const ChatTemplate& tmpl, const std::string& template_name,
                       const std::string& model_template_text) {
  TurnFormat f{tool_call_format(tmpl.kind), false};
  if (template_name.empty() && !model_template_text.empty()) {
    f.calls = tool_call_format_from_template_text(model_template_text, f.calls);
    f.reasoning = template_has_reasoning(model_template_text);
  }
  return f;
}

ThinkStart think_start_of_prompt(std::string_view prompt, std::span<const TextSpan> literal) {
  size_t end = prompt.size();
  while (end > 0 && is_space(prompt[end - 1])) --end;
  auto template_tail = [&](std::string_view marker) {
    if (end < marker.size() || prompt.compare(end - marker.size(), marker.size(), marker) != 0)
      return false;
    const size_t at = end - marker.size();
    for (const TextSpan& s : literal)
      if (s.begin < end && at < s.end) return false;  // the client wrote it
    return true;
  };
  if (template_tail("<think>")) return ThinkStart::inside;
  if (template_tail("</think>")) return ThinkStart::after;
  return ThinkStart::model;
}

bool template_has_reasoning(const std::string& text) {
  return text.find("<think>") != std::string::npos || text.find("</think>") != std::string::npos;
}

std::vector<std::string> turn_markers(TurnFormat format) {
  std::vector<std::string> m;
  switch (format.calls) {
    case ToolCallFormat::hermes:
      m = {"<tool_call>", "</tool_call>"};
      break;
    case ToolCallFormat::json_turn:
      m = {"<|python_tag|>"};
      break;
    case ToolCallFormat::mistral:
      m = {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"};
      break;
  }
  if (format.reasoning) {
    m.push_back("<think>");
    m.push_back("</think>");
  }
  return m;
}

ParsedTurn parse_tool_turn(const std::string& text, TurnFormat format, bool calls) {
  ToolCallStream stream(format, calls);
  std::vector<TurnEvent> events;
  stream.push(text, events);
  stream.finish(events);
  ParsedTurn turn;
  std::vector<ParsedToolCall> started;
  for (TurnEvent& e : events) {
    switch (e.kind) {
      case TurnEvent::Kind::content:
        turn.content += e.text;
        break;
      case TurnEvent::Kind::reasoning:
        turn.reasoning += e.text;
        break;
      case TurnEvent::Kind::call_start:
        started.push_back({std::move(e.text), {}});
        break;
      case TurnEvent::Kind::call_arguments:
        started[(size_t)e.index].arguments_json += e.text;
        break;
      case TurnEvent::Kind::call_end:
        if (e.valid) turn.calls.push_back(std::move(started[(size_t)e.index]));
        break;
    }
  }
  return turn;
}

std::optional<ParsedToolCall> find_tool_call(const std::string& text, TurnFormat format) {
  if (format.calls != ToolCallFormat::hermes) return std::nullopt;
  ToolCallStream stream(format);
  std::vector<TurnEvent> events;
  stream.push(text, events);
  std::vector<ParsedToolCall> started;
  for (TurnEvent& e : events) {
    if (e.kind == TurnEvent::Kind::call_start) started.push_back({std::move(e.text), {}});
    if (e.kind == TurnEvent::Kind::call_arguments)
      started[(size_t)e.index].arguments_json += e.text;
    if (e.kind == TurnEvent::Kind::call_end && e.valid) return std::move(started[(size_t)e.index]);
  }
  return std::nullopt;
}

}  // namespace infercept
