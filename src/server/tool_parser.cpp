#include "server/tool_parser.h"

namespace infercept::server {

namespace {

const std::string kOpen = "<tool_call>";

}  // namespace

AssistantTurn parse_assistant_turn(const std::string& text, TurnFormat format, bool calls) {
  ParsedTurn parsed = parse_tool_turn(text, format, calls);
  AssistantTurn turn;
  turn.content = std::move(parsed.content);
  turn.reasoning = std::move(parsed.reasoning);
  for (ParsedToolCall& p : parsed.calls) {
    ToolCall c;
    c.id = random_id("call_");
    c.name = std::move(p.name);
    c.arguments_json = std::move(p.arguments_json);
    turn.calls.push_back(std::move(c));
  }
  return turn;
}

AssistantTurn parse_assistant_turn(const std::string& text, ChatTemplateKind kind) {
  return parse_assistant_turn(text, TurnFormat{tool_call_format(kind), false});
}

std::string forced_tool_prefix(ChatTemplateKind kind, ToolChoice choice, const std::string& name) {
  if (choice != ToolChoice::required && choice != ToolChoice::named) return {};
  const std::string name_json = json(name).dump();
  if (kind == ChatTemplateKind::chatml) {
    if (choice == ToolChoice::required) return kOpen + "\n{\"name\": \"";
    return kOpen + "\n{\"name\": " + name_json + ", \"arguments\": ";
  }
  const char* key = kind == ChatTemplateKind::llama3 ? "parameters" : "arguments";
  if (choice == ToolChoice::required) return "{\"name\": \"";
  return "{\"name\": " + name_json + ", \"" + key + "\": ";
}

ChatTurnStreamer::ChatTurnStreamer(TurnFormat format, bool calls, std::set<std::string> held)
    : reader_(format, calls), held_(std::move(held)) {}

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
          s.id = random_id("call_");
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
        // The index the call was announced with: its place among the announced ones.
        size_t index = 0;
        for (size_t i = 0; i < (size_t)e.index; ++i) index += started_[i].id.empty() ? 0 : 1;
        out.push_back(
            {{"tool_calls", json::array({{{"index", index},
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

}  // namespace infercept::server
