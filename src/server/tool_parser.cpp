#include "server/tool_parser.h"

#include "engine/tool_call.h"

namespace infercept::server {

namespace {

const std::string kOpen = "<tool_call>";
const std::string kPythonTag = "<|python_tag|>";

bool is_prefix_of(const std::string& s, const std::string& full) {
  return s.size() <= full.size() && full.compare(0, s.size(), s) == 0;
}

}  // namespace

AssistantTurn parse_assistant_turn(const std::string& text, ChatTemplateKind kind) {
  ParsedTurn parsed = parse_tool_turn(text, tool_call_format(kind));
  AssistantTurn turn;
  turn.content = std::move(parsed.content);
  for (ParsedToolCall& p : parsed.calls) {
    ToolCall c;
    c.id = random_id("call_");
    c.name = std::move(p.name);
    c.arguments_json = std::move(p.arguments_json);
    turn.calls.push_back(std::move(c));
  }
  return turn;
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

std::string ToolTextFilter::push(const std::string& delta) {
  text_ += delta;
  if (!active_) {
    const std::string out = text_.substr(emitted_);
    emitted_ = text_.size();
    return out;
  }
  if (holding_) return {};
  if (kind_ == ChatTemplateKind::chatml) {
    // Everything before an opening tag, minus trailing white space and a partial tag.
    size_t safe = text_.size();
    const size_t open = text_.find(kOpen, emitted_);
    if (open != std::string::npos) {
      safe = open;
      holding_ = true;
    } else {
      for (size_t k = std::min(kOpen.size() - 1, text_.size()); k > 0; --k)
        if (text_.compare(text_.size() - k, k, kOpen, 0, k) == 0) {
          safe = text_.size() - k;
          break;
        }
    }
    while (safe > emitted_ && std::string(" \t\r\n").find(text_[safe - 1]) != std::string::npos)
      --safe;
    if (safe <= emitted_) return {};
    const std::string out = text_.substr(emitted_, safe - emitted_);
    emitted_ = safe;
    return out;
  }
  // JSON-call templates: a turn that starts like a call is held back whole.
  const size_t b = text_.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const std::string head = text_.substr(b);
  if (head.front() == '{' || is_prefix_of(head, kPythonTag) || head.rfind(kPythonTag, 0) == 0) {
    if (head.front() == '{' || head.rfind(kPythonTag, 0) == 0) holding_ = true;
    return {};
  }
  const std::string out = text_.substr(emitted_);
  emitted_ = text_.size();
  return out;
}

}  // namespace infercept::server
