#include "server/tool_parser.h"

#include "server/constraints.h"

namespace infercept::server {

std::string tool_call_id(ToolCallFormat format) {
  // Mistral's templates refuse any other id (9 alphanumerics, its tokenizer's rule).
  if (format == ToolCallFormat::mistral) return random_id("").substr(0, 9);
  return random_id("call_");
}

AssistantTurn parse_assistant_turn(const std::string& text, TurnFormat format, bool calls) {
  ParsedTurn parsed = parse_tool_turn(text, format, calls);
  AssistantTurn turn;
  turn.content = std::move(parsed.content);
  turn.reasoning = std::move(parsed.reasoning);
  for (ParsedToolCall& p : parsed.calls) {
    ToolCall c;
    c.id = tool_call_id(format.calls);
    c.name = std::move(p.name);
    c.arguments_json = std::move(p.arguments_json);
    turn.calls.push_back(std::move(c));
  }
  return turn;
}

AssistantTurn parse_assistant_turn(const std::string& text, ChatTemplateKind kind) {
  return parse_assistant_turn(text, TurnFormat{tool_call_format(kind), false});
}

std::string forced_tool_prefix(const grammar::ToolCallSyntax& syntax, ToolChoice choice,
                               const std::string& name) {
  if (choice != ToolChoice::required && choice != ToolChoice::named) return {};
  // The start of a call as the constraint's grammar writes it (tool_call_syntax), so that the
  // grammar reads the forced text.
  using Shape = grammar::ToolCallSyntax::Shape;
  if (syntax.shape == Shape::name_args)
    return choice == ToolChoice::required ? syntax.open : syntax.open + name + syntax.args_marker;
  std::string s = syntax.shape == Shape::list ? syntax.open + "[{"
                  : syntax.open.empty()       ? "{"
                                              : syntax.open + "\n{";
  s += json(syntax.name_key).dump() + ": ";
  if (choice == ToolChoice::required) return s + "\"";
  return s + json(name).dump() + ", " + json(syntax.arguments_key).dump() + ": ";
}

ChatTurnStreamer::ChatTurnStreamer(TurnFormat format, bool calls, std::set<std::string> held)
    : reader_(format, calls), format_(format.calls), held_(std::move(held)) {}

std::vector<json> ChatTurnStreamer::push(const std::string& text) {
  std::vector<TurnEvent> events;
  reader_.push(text, events);
  return deltas(events);
}

std::vector<json> ChatTurnStreamer::finish() {
  std::vector<TurnEvent> events;
  reader_.finish(events);
  return deltas(events);
}

std::vector<json> ChatTurnStreamer::deltas(std::vector<TurnEvent>& events) {
  std::vector<json> out;
  for (TurnEvent& e : events) {
    switch (e.kind) {
      case TurnEvent::Kind::content:
        out.push_back({{"content", std::move(e.text)}});
        break;
      case TurnEvent::Kind::reasoning:
        out.push_back({{"reasoning_content", std::move(e.text)}});
        break;
      case TurnEvent::Kind::call_start: {
        Started s;
        holding_ = holding_ || held_.count(e.text) != 0;
        if (!holding_) {
          s.id = tool_call_id(format_);
          s.index = announced_;
          out.push_back({{"tool_calls",
                          json::array({{{"index", announced_},
                                        {"id", s.id},
                                        {"type", "function"},
                                        {"function", {{"name", e.text}, {"arguments", ""}}}}})}});
          ++announced_;
        }
        started_.push_back(std::move(s));
        break;
      }
      case TurnEvent::Kind::call_arguments: {
        const Started& s = started_.at((size_t)e.index);
        if (s.id.empty()) break;
        out.push_back(
            {{"tool_calls", json::array({{{"index", s.index},
                                          {"function", {{"arguments", std::move(e.text)}}}}})}});
        break;
      }
      case TurnEvent::Kind::call_end:
        started_.at((size_t)e.index).valid = e.valid;
        break;
    }
  }
  return out;
}

void ChatTurnStreamer::assign_ids(std::vector<ToolCall>& calls) const {
  size_t k = 0;
  for (const Started& s : started_) {
    if (!s.valid) continue;
    if (k < calls.size() && !s.id.empty()) calls[k].id = s.id;
    ++k;
  }
}

std::vector<ToolCall> ChatTurnStreamer::held_calls(const std::vector<ToolCall>& calls,
                                                   size_t* first_index) const {
  size_t sent = 0;
  for (const Started& s : started_) sent += s.valid && !s.id.empty() ? 1 : 0;
  *first_index = announced_;
  if (sent >= calls.size()) return {};
  return std::vector<ToolCall>(calls.begin() + (ptrdiff_t)sent, calls.end());
}

void visit_chat_delta(const json& d, const ChatDeltaVisitor& v) {
  auto text = [&](const char* key, const std::function<void(const std::string&)>& f) {
    auto it = d.find(key);
    if (f && it != d.end() && it->is_string() && !it->get_ref<const std::string&>().empty())
      f(it->get<std::string>());
  };
  text("reasoning_content", v.reasoning);
  text("content", v.content);
  auto calls = d.find("tool_calls");
  if (calls == d.end() || !calls->is_array()) return;
  for (const json& c : *calls) {
    const int64_t index = c.value("index", (int64_t)0);
    const json fn = c.value("function", json::object());
    if (c.contains("id") && v.call_start)
      v.call_start(index, c.value("id", std::string()), fn.value("name", std::string()));
    const std::string piece = fn.value("arguments", std::string());
    if (!piece.empty() && v.call_arguments) v.call_arguments(index, piece);
  }
}

}  // namespace infercept::server
