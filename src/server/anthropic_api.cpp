// Anthropic's Messages API over the chat path (anthropic_api.h): its request as a chat body,
// a chat turn as a Message, and the Messages stream's events.
#include "server/anthropic_api.h"

#include "server/json_fields.h"
#include "server/tool_parser.h"

namespace infercept::server {

using namespace fields;

namespace {

// A string, or text blocks joined.
std::optional<ApiError> text_of(const json& c, const std::string& param, std::string& out) {
  return joined_text(
      c, param, "content block",
      [](const std::string& type) -> const char* { return type == "text" ? "text" : nullptr; },
      out);
}

// One message's content blocks as chat messages: a user message's tool_result blocks are
// tool messages (in their order, before its text), an assistant message's tool_use blocks
// its tool_calls and its thinking block its reasoning.
std::optional<ApiError> message_blocks(const std::string& role, const json& content,
                                       const std::string& p, json& messages) {
  if (content.is_string()) {
    messages.push_back({{"role", role}, {"content", content}});
    return std::nullopt;
  }
  if (!content.is_array()) return wrong(p, "a string or an array of content blocks", content);
  ChatMessage turn{.role = "assistant"};  // an assistant message's text, calls and thinking
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    const std::string bp = p + "[" + std::to_string(i) + "]";
    if (!b.is_object()) return wrong(bp, "an object", b);
    std::string type;
    if (auto e = string_member(b, "type", bp, type)) return e;
    if (type == "text") {
      std::string t;
      if (auto e = string_member(b, "text", bp, t)) return e;
      text += t;
    } else if (type == "tool_use" && role == "assistant") {
      ToolCall call;
      if (auto e = string_member(b, "id", bp, call.id)) return e;
      if (auto e = string_member(b, "name", bp, call.name)) return e;
      const json* input = member(b, "input");
      if (input != nullptr && !input->is_object()) return wrong(bp + ".input", "an object", *input);
      call.arguments_json = input != nullptr ? dump(*input) : std::string("{}");
      turn.tool_calls.push_back(std::move(call));
    } else if (type == "tool_result" && role == "user") {
      std::string id, result;
      if (auto e = string_member(b, "tool_use_id", bp, id)) return e;
      if (const json* c = member(b, "content"))
        if (auto e = text_of(*c, bp + ".content", result)) return e;
      if (const json* err = member(b, "is_error"); err != nullptr && err->is_boolean() && *err)
        result = "Error: " + result;
      messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
    } else if (type == "thinking" && role == "assistant") {
      std::string t;
      if (auto e = string_member(b, "thinking", bp, t)) return e;
      turn.reasoning_content += t;
    } else if (type == "redacted_thinking" && role == "assistant") {
      continue;  // nothing this server can read back
    } else {
      return invalid_request("content block type '" + type + "' is not supported in a " + role +
                                 " message (text, tool_use, tool_result, thinking)",
                             bp + ".type", "unsupported_content");
    }
  }
  if (role == "assistant") {
    turn.content = std::move(text);
    messages.push_back(chat_message_json(turn));
  } else if (!text.empty() || messages.empty() || messages.back()["role"] != "tool") {
    messages.push_back({{"role", "user"}, {"content", text}});
  }
  return std::nullopt;
}

std::optional<ApiError> chat_tools(const json& tools, json& out) {
  out = json::array();
  return each_object(
      tools, "tools", [&](const json& t, const std::string& p) -> std::optional<ApiError> {
        if (const json* type = member(t, "type"); type != nullptr && *type != "custom")
          return unsupported("tool type '" +
                                 (type->is_string() ? type->get<std::string>() : dump(*type)) +
                                 "' is not supported (client tools only: name, description, "
                                 "input_schema)",
                             p + ".type");
        json fn = json::object();
        std::string name;
        if (auto e = string_member(t, "name", p, name)) return e;
        fn["name"] = name;
        if (const json* d = member(t, "description")) fn["description"] = *d;
        if (const json* s = member(t, "input_schema")) fn["parameters"] = *s;
        if (const json* s = member(t, "strict")) fn["strict"] = *s;
        out.push_back({{"type", "function"}, {"function", std::move(fn)}});
        return std::nullopt;
      });
}

std::optional<ApiError> chat_tool_choice(const json& tc, json& chat) {
  if (!tc.is_object()) return wrong("tool_choice", "an object", tc);
  std::string type;
  if (auto e = string_member(tc, "type", "tool_choice", type)) return e;
  if (type == "auto" || type == "none") {
    chat["tool_choice"] = type;
  } else if (type == "any") {
    chat["tool_choice"] = "required";
  } else if (type == "tool") {
    std::string name;
    if (auto e = string_member(tc, "name", "tool_choice", name)) return e;
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
  } else {
    return invalid_request("tool_choice type '" + type + "' is not one of auto, any, tool, none",
                           "tool_choice.type");
  }
  if (const json* d = member(tc, "disable_parallel_tool_use"); d != nullptr && d->is_boolean())
    chat["parallel_tool_calls"] = !d->get<bool>();
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> messages_to_chat_body(const json& body, json& chat) {
  if (!body.is_object()) return wrong("body", "a JSON object", body);
  chat = json::object();
  json messages = json::array();
  if (const json* sys = member(body, "system")) {
    std::string text;
    if (auto e = text_of(*sys, "system", text)) return e;
    messages.push_back({{"role", "system"}, {"content", text}});
  }
  const json* msgs = member(body, "messages");
  if (msgs == nullptr) return missing("messages");
  if (!msgs->is_array()) return wrong("messages", "an array", *msgs);
  if (msgs->empty()) return invalid_request("'messages' must not be empty", "messages");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return wrong(p, "an object", m);
    std::string role;
    if (auto e = string_member(m, "role", p, role)) return e;
    if (role != "user" && role != "assistant")
      return invalid_request("unknown role '" + role + "' (user, assistant)", p + ".role");
    const json* content = member(m, "content");
    if (content == nullptr) return missing(p + ".content");
    if (auto e = message_blocks(role, *content, p + ".content", messages)) return e;
  }
  chat["messages"] = std::move(messages);
  if (const json* m = member(body, "model")) chat["model"] = *m;
  const json* max_tokens = member(body, "max_tokens");
  if (max_tokens == nullptr) return missing("max_tokens");
  chat["max_tokens"] = *max_tokens;
  if (const json* t = member(body, "tools")) {
    json tools;
    if (auto e = chat_tools(*t, tools)) return e;
    if (!tools.empty()) chat["tools"] = std::move(tools);
  }
  if (const json* tc = member(body, "tool_choice"))
    if (auto e = chat_tool_choice(*tc, chat)) return e;
  if (const json* s = member(body, "stop_sequences")) chat["stop"] = *s;
  for (const char* key : {"temperature", "top_p", "top_k", "stream", "intercept", "cache_salt",
                          "chat_template_kwargs", "seed"})
    if (const json* v = member(body, key)) chat[key] = *v;
  return std::nullopt;
}

json anthropic_error_body(const ApiError& e) {
  std::string type = "api_error";
  if (e.status == 400 || e.status == 413 || e.status == 422) type = "invalid_request_error";
  if (e.status == 401) type = "authentication_error";
  if (e.status == 403) type = "permission_error";
  if (e.status == 404) type = "not_found_error";
  if (e.status == 429) type = "rate_limit_error";
  if (e.status == 503) type = "overloaded_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
}

std::string anthropic_stop_reason(const std::string& finish_reason) {
  if (finish_reason == "length") return "max_tokens";
  if (finish_reason == "tool_calls") return "tool_use";
  return "end_turn";
}

json anthropic_usage(int64_t prompt_tokens, int64_t output_tokens, int64_t cached_tokens) {
  return {{"input_tokens", prompt_tokens - cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", cached_tokens},
          {"output_tokens", output_tokens}};
}

json anthropic_content(const std::string& text, const std::string& reasoning,
                       const std::vector<ToolCall>& calls) {
  json out = json::array();
  if (!reasoning.empty())
    out.push_back({{"type", "thinking"}, {"thinking", reasoning}, {"signature", ""}});
  if (!text.empty() || calls.empty()) out.push_back({{"type", "text"}, {"text", text}});
  for (const ToolCall& c : calls) {
    json input = json::parse(c.arguments_json, nullptr, /*allow_exceptions=*/false);
    if (!input.is_object()) input = json::object();
    out.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", input}});
  }
  return out;
}

json anthropic_message(const std::string& id, const std::string& model, json content,
                       const std::string& stop_reason, json usage) {
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model},
          {"content", std::move(content)},
          {"stop_reason", stop_reason.empty() ? json(nullptr) : json(stop_reason)},
          {"stop_sequence", nullptr},
          {"usage", std::move(usage)}};
}

// --- the stream ------------------------------------------------------------------------------

std::string AnthropicStream::event(const std::string& type, json data) const {
  data["type"] = type;
  return "event: " + type + "\ndata: " + dump(data) + "\n\n";
}

std::string AnthropicStream::start(const json& usage) {
  return event("message_start",
               {{"message", anthropic_message(id_, model_, json::array(), "", usage)}});
}

void AnthropicStream::open_block(Open kind, json block, std::string& out) {
  close_block(out);
  open_ = kind;
  ++index_;
  out += event("content_block_start", {{"index", index_}, {"content_block", std::move(block)}});
}

void AnthropicStream::close_block(std::string& out) {
  if (open_ == Open::none) return;
  if (open_ == Open::thinking)
    out += event("content_block_delta",
                 {{"index", index_}, {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
  out += event("content_block_stop", {{"index", index_}});
  open_ = Open::none;
  open_call_index_ = -1;
}

void AnthropicStream::text_delta(Open kind, const std::string& piece, std::string& out) {
  if (piece.empty()) return;
  const bool thinking = kind == Open::thinking;
  if (open_ != kind)
    open_block(kind,
               thinking ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                        : json{{"type", "text"}, {"text", ""}},
               out);
  out += event("content_block_delta",
               {{"index", index_},
                {"delta", thinking ? json{{"type", "thinking_delta"}, {"thinking", piece}}
                                   : json{{"type", "text_delta"}, {"text", piece}}}});
}

std::string AnthropicStream::delta(const json& d) {
  std::string out;
  ChatDeltaVisitor v;
  v.reasoning = [&](const std::string& t) { text_delta(Open::thinking, t, out); };
  v.content = [&](const std::string& t) { text_delta(Open::text, t, out); };
  v.call_start = [&](int64_t index, const std::string& id, const std::string& name) {
    open_block(Open::tool,
               {{"type", "tool_use"}, {"id", id}, {"name", name}, {"input", json::object()}}, out);
    open_call_index_ = index;
  };
  v.call_arguments = [&](int64_t index, const std::string& piece) {
    if (open_ != Open::tool || index != open_call_index_) return;
    out += event(
        "content_block_delta",
        {{"index", index_}, {"delta", {{"type", "input_json_delta"}, {"partial_json", piece}}}});
  };
  visit_chat_delta(d, v);
  return out;
}

std::string AnthropicStream::finish(const std::string& stop_reason, const json& usage,
                                    const json& extra) {
  std::string out;
  if (index_ < 0) open_block(Open::text, {{"type", "text"}, {"text", ""}}, out);  // none at all
  close_block(out);
  json d = {{"delta", {{"stop_reason", stop_reason}, {"stop_sequence", nullptr}}},
            {"usage", usage}};
  if (extra.is_object()) d.update(extra);
  out += event("message_delta", std::move(d));
  out += event("message_stop", json::object());
  return out;
}

std::string AnthropicStream::error(const ApiError& e) {
  return event("error", {{"error", anthropic_error_body(e)["error"]}});
}

}  // namespace infercept::server
