#include "server/tool_parser.h"

#include "core/json_depth.h"

#include <optional>

namespace infercept::server {

namespace {

using ojson = nlohmann::ordered_json;

const std::string kOpen = "<tool_call>";
const std::string kClose = "</tool_call>";
const std::string kPythonTag = "<|python_tag|>";

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string rtrim(const std::string& s) {
  const size_t e = s.find_last_not_of(" \t\r\n");
  return e == std::string::npos ? std::string() : s.substr(0, e + 1);
}

// {"name": ..., "<args_key>": {...}} as a call; arguments keep the model's key order.
std::optional<ToolCall> call_from_json(const std::string& body, const char* args_key) {
  // Model output: as deep as its tokens let it be, so bounded like a request body.
  if (!json_depth_ok(body)) return std::nullopt;
  const ojson j = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  ToolCall c;
  c.id = random_id("call_");
  c.name = name->get<std::string>();
  auto args = j.find(args_key);
  if (args == j.end()) args = j.find("arguments");
  if (args == j.end() || args->is_null())
    c.arguments_json = "{}";
  else if (args->is_string())
    c.arguments_json = args->get<std::string>();
  else
    c.arguments_json = args->dump(-1, ' ', false, ojson::error_handler_t::replace);
  return c;
}

bool is_prefix_of(const std::string& s, const std::string& full) {
  return s.size() <= full.size() && full.compare(0, s.size(), s) == 0;
}

}  // namespace

AssistantTurn parse_assistant_turn(const std::string& text, ChatTemplateKind kind) {
  AssistantTurn turn;
  if (kind == ChatTemplateKind::chatml) {
    size_t pos = 0;
    size_t first = std::string::npos;
    std::string outside;
    while (true) {
      const size_t a = text.find(kOpen, pos);
      if (a == std::string::npos) break;
      size_t b = text.find(kClose, a + kOpen.size());
      // A turn may end right after the JSON without the closing tag: accept the call.
      const size_t body_end = b == std::string::npos ? text.size() : b;
      auto call = call_from_json(trim(text.substr(a + kOpen.size(), body_end - a - kOpen.size())),
                                 "arguments");
      if (!call) break;
      if (first == std::string::npos) first = a;
      outside += text.substr(pos, a - pos);
      turn.calls.push_back(std::move(*call));
      pos = b == std::string::npos ? text.size() : b + kClose.size();
    }
    if (turn.calls.empty()) {
      turn.content = text;
    } else {
      outside += text.substr(pos);
      turn.content = trim(outside).empty() ? std::string() : rtrim(outside);
    }
    return turn;
  }
  // Llama 3 (and Llama 2, which has no format of its own): the whole turn is one JSON call,
  // or several, one per line.
  std::string t = trim(text);
  if (t.rfind(kPythonTag, 0) == 0) t = trim(t.substr(kPythonTag.size()));
  if (!t.empty() && t.front() == '{') {
    const char* key = kind == ChatTemplateKind::llama3 ? "parameters" : "arguments";
    if (auto c = call_from_json(t, key)) {
      turn.calls.push_back(std::move(*c));
      return turn;
    }
    std::vector<ToolCall> calls;
    size_t start = 0;
    bool all = true;
    while (start < t.size()) {
      size_t nl = t.find('\n', start);
      if (nl == std::string::npos) nl = t.size();
      const std::string line = trim(t.substr(start, nl - start));
      if (!line.empty()) {
        auto c = call_from_json(line, key);
        if (!c) {
          all = false;
          break;
        }
        calls.push_back(std::move(*c));
      }
      start = nl + 1;
    }
    if (all && !calls.empty()) {
      turn.calls = std::move(calls);
      return turn;
    }
  }
  turn.content = text;
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
