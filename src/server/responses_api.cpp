// The Responses API over the chat path (responses_api.h): its request as a chat body, a chat
// turn as a Response object, and the Responses stream's events.
#include "server/responses_api.h"

#include <utility>

#include "server/json_fields.h"
#include "server/tool_parser.h"

namespace infercept::server {

namespace {

using namespace fields;

// An item's or a tool output's text: a string, or text parts (input_text, output_text, text;
// a refusal's text). Images, files and audio are refused: this server reads text.
std::optional<ApiError> content_text(const json& c, const std::string& param, std::string& out) {
  return joined_text(
      c, param, "content part",
      [](const std::string& type) -> const char* {
        if (type == "refusal") return "refusal";
        return type == "input_text" || type == "output_text" || type == "text" ? "text" : nullptr;
      },
      out);
}

// Input items as chat messages. An assistant message and the function_call items after it
// are one assistant turn (its text and its calls, as the chat path sends them back); a
// reasoning item goes with the assistant turn that follows it.
std::optional<ApiError> input_messages(const json& input, json& messages) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return std::nullopt;
  }
  std::optional<ChatMessage> turn;  // the assistant turn calls may still join
  std::string reasoning;            // of the next assistant turn
  auto end_turn = [&] {
    if (turn) messages.push_back(chat_message_json(*turn));
    turn.reset();
  };
  auto assistant = [&]() -> ChatMessage& {
    if (!turn) turn = ChatMessage{.role = "assistant"};
    if (!reasoning.empty()) turn->reasoning_content = std::exchange(reasoning, std::string());
    return *turn;
  };
  auto error = each_object(
      input, "input", [&](const json& item, const std::string& p) -> std::optional<ApiError> {
        std::string type = "message";  // an "easy" input message has a role and no type
        if (const json* t = member(item, "type")) {
          if (!t->is_string()) return wrong(p + ".type", "a string", *t);
          type = t->get<std::string>();
        }
        if (type == "message") {
          std::string role, text;
          if (auto e = string_member(item, "role", p, role)) return e;
          if (role != "user" && role != "system" && role != "developer" && role != "assistant")
            return invalid_request(
                "unknown role '" + role + "' (user, system, developer, assistant)", p + ".role");
          const json* c = member(item, "content");
          if (c == nullptr) return missing(p + ".content");
          if (auto e = content_text(*c, p + ".content", text)) return e;
          end_turn();
          if (role == "assistant")
            assistant().content = text;
          else
            messages.push_back({{"role", role}, {"content", text}});
        } else if (type == "function_call") {
          ToolCall call;
          if (auto e = string_member(item, "call_id", p, call.id)) return e;
          if (auto e = string_member(item, "name", p, call.name)) return e;
          if (auto e = string_member(item, "arguments", p, call.arguments_json)) return e;
          assistant().tool_calls.push_back(std::move(call));
        } else if (type == "function_call_output") {
          std::string call_id, text;
          if (auto e = string_member(item, "call_id", p, call_id)) return e;
          const json* out = member(item, "output");
          if (out == nullptr) return missing(p + ".output");
          if (auto e = content_text(*out, p + ".output", text)) return e;
          end_turn();
          messages.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", text}});
        } else if (type == "reasoning") {
          // Its text (content, else the summary) goes back with the turn it preceded, where a
          // template renders reasoning; an encrypted_content alone is nothing this server wrote.
          reasoning.clear();
          for (const char* key : {"content", "summary"}) {
            const json* parts = member(item, key);
            if (parts == nullptr || !parts->is_array()) continue;
            for (const json& part : *parts)
              if (part.is_object() && part.contains("text") && part["text"].is_string())
                reasoning += part["text"].get<std::string>();
            if (!reasoning.empty()) break;
          }
        } else if (type == "item_reference") {
          return unsupported("item_reference is not supported (send the items themselves)",
                             p + ".type");
        } else {
          return invalid_request("input item type '" + type +
                                     "' is not supported (message, function_call, "
                                     "function_call_output, reasoning)",
                                 p + ".type", "unsupported_parameter");
        }
        return std::nullopt;
      });
  if (error) return error;
  end_turn();
  return std::nullopt;
}

// Responses tools are flat ({"type": "function", "name", "parameters", ...}); only function
// tools run here.
std::optional<ApiError> chat_tools(const json& tools, json& out) {
  out = json::array();
  return each_object(
      tools, "tools", [&](const json& t, const std::string& p) -> std::optional<ApiError> {
        std::string type;
        if (auto e = string_member(t, "type", p, type)) return e;
        if (type != "function")
          return unsupported("tool type '" + type + "' is not supported (function tools only)",
                             p + ".type");
        json fn = json::object();
        for (const char* key :
             {"name", "description", "parameters", "strict", "expected_duration_ms"})
          if (const json* v = member(t, key)) fn[key] = *v;
        if (!fn.contains("name")) return missing(p + ".name");
        out.push_back({{"type", "function"}, {"function", std::move(fn)}});
        return std::nullopt;
      });
}

std::optional<ApiError> chat_tool_choice(const json& tc, json& out) {
  if (tc.is_string()) {
    out = tc;  // "none", "auto", "required": the chat parser checks the word
    return std::nullopt;
  }
  if (!tc.is_object()) return wrong("tool_choice", "a string or an object", tc);
  std::string type;
  if (auto e = string_member(tc, "type", "tool_choice", type)) return e;
  if (type != "function")
    return unsupported("tool_choice type '" + type + "' is not supported (function)",
                       "tool_choice.type");
  std::string name;
  if (auto e = string_member(tc, "name", "tool_choice", name)) return e;
  out = {{"type", "function"}, {"function", {{"name", name}}}};
  return std::nullopt;
}

// text.format as the chat response_format.
std::optional<ApiError> chat_response_format(const json& text, json& chat) {
  if (!text.is_object()) return wrong("text", "an object", text);
  const json* format = member(text, "format");
  if (format == nullptr) return std::nullopt;
  if (!format->is_object()) return wrong("text.format", "an object", *format);
  std::string type;
  if (auto e = string_member(*format, "type", "text.format", type)) return e;
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    chat["response_format"] = {{"type", "json_object"}};
    return std::nullopt;
  }
  if (type != "json_schema")
    return unsupported("text.format type '" + type +
                           "' is not supported (text, json_object, "
                           "json_schema)",
                       "text.format.type");
  json schema = json::object();
  for (const char* key : {"name", "schema", "strict", "description"})
    if (const json* v = member(*format, key)) schema[key] = *v;
  chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  return std::nullopt;
}

}  // namespace

bool responses_store_requested(const json& body) {
  const json* store = member(body, "store");
  return store == nullptr || !store->is_boolean() || store->get<bool>();
}

size_t instruction_messages(const json& body) {
  return member(body, "instructions") != nullptr ? 1 : 0;
}

std::string responses_status(const std::string& finish_reason) {
  return finish_reason == "length" ? "incomplete" : "completed";
}

std::optional<ApiError> responses_to_chat_body(const json& body, const json* prior, json& chat) {
  if (!body.is_object()) return wrong("body", "a JSON object", body);
  if (member(body, "conversation") != nullptr)
    return unsupported(
        "conversation objects are not supported (chain responses with previous_response_id, "
        "or send the whole conversation as input)",
        "conversation");
  if (member(body, "prompt") != nullptr)
    return unsupported("prompt templates are not supported (send instructions and input)",
                       "prompt");
  for (const char* key : {"store", "background"})
    if (const json* v = member(body, key); v != nullptr && !v->is_boolean())
      return wrong(key, "a boolean", *v);
  if (const json* bg = member(body, "background"); bg != nullptr && bg->get<bool>())
    return unsupported("background responses are not supported", "background");
  chat = json::object();
  json messages = json::array();
  if (const json* ins = member(body, "instructions")) {
    if (!ins->is_string()) return wrong("instructions", "a string", *ins);
    messages.push_back({{"role", "system"}, {"content", *ins}});
  }
  if (prior != nullptr)
    for (const json& m : *prior) messages.push_back(m);
  const json* input = member(body, "input");
  if (input == nullptr) return missing("input");
  const size_t before_input = messages.size();
  if (auto e = input_messages(*input, messages)) return e;
  if (messages.size() == before_input) return invalid_request("'input' must not be empty", "input");
  chat["messages"] = std::move(messages);
  if (const json* m = member(body, "model")) chat["model"] = *m;
  if (const json* t = member(body, "tools")) {
    json tools;
    if (auto e = chat_tools(*t, tools)) return e;
    if (!tools.empty()) chat["tools"] = std::move(tools);
  }
  if (const json* tc = member(body, "tool_choice")) {
    json out;
    if (auto e = chat_tool_choice(*tc, out)) return e;
    chat["tool_choice"] = std::move(out);
  }
  if (const json* t = member(body, "text"))
    if (auto e = chat_response_format(*t, chat)) return e;
  if (const json* m = member(body, "max_output_tokens")) chat["max_completion_tokens"] = *m;
  // Same names and meaning in both APIs (the infercept and vLLM extensions included).
  for (const char* key :
       {"temperature", "top_p", "parallel_tool_calls", "stream", "prompt_cache_key", "seed", "stop",
        "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
        "cache_salt", "chat_template_kwargs", "intercept", "intercept_after_tokens",
        "intercept_tool", "server_tools"})
    if (const json* v = member(body, key)) chat[key] = *v;
  return std::nullopt;
}

json responses_usage(int64_t input_tokens, int64_t output_tokens, int64_t cached_tokens) {
  return {{"input_tokens", input_tokens},
          {"input_tokens_details", {{"cached_tokens", cached_tokens}}},
          {"output_tokens", output_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", input_tokens + output_tokens}};
}

namespace {

json reasoning_item(const std::string& id, const std::string& text) {
  json content = json::array();
  if (!text.empty()) content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return {{"type", "reasoning"}, {"id", id}, {"summary", json::array()}, {"content", content}};
}

json output_text_part(const std::string& text) {
  return {{"type", "output_text"},
          {"text", text},
          {"annotations", json::array()},
          {"logprobs", json::array()}};
}

json message_item(const std::string& id, const std::string& status, json content) {
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

json call_item(const std::string& id, const std::string& call_id, const std::string& name,
               const std::string& arguments, const std::string& status) {
  return {{"type", "function_call"}, {"id", id},        {"call_id", call_id}, {"name", name},
          {"arguments", arguments},  {"status", status}};
}

}  // namespace

json response_output_items(const std::string& content, const std::string& reasoning,
                           const std::vector<ToolCall>& calls) {
  json out = json::array();
  if (!reasoning.empty()) out.push_back(reasoning_item(random_id("rs_"), reasoning));
  if (!content.empty() || calls.empty())
    out.push_back(
        message_item(random_id("msg_"), "completed", json::array({output_text_part(content)})));
  for (const ToolCall& c : calls)
    out.push_back(call_item(random_id("fc_"), c.id, c.name, c.arguments_json, "completed"));
  return out;
}

json response_object(const ResponseHeader& h, const std::string& status, const json& output,
                     const json& usage) {
  const json& q = h.request;
  auto echo = [&](const char* key, json fallback) {
    const json* v = member(q, key);
    return v != nullptr ? *v : fallback;
  };
  json r = {{"id", h.id},
            {"object", "response"},
            {"created_at", h.created_at},
            {"status", status},
            {"background", false},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"instructions", echo("instructions", nullptr)},
            {"max_output_tokens", echo("max_output_tokens", nullptr)},
            {"metadata", echo("metadata", json::object())},
            {"model", h.model},
            {"output", output},
            {"parallel_tool_calls", echo("parallel_tool_calls", true)},
            {"previous_response_id", echo("previous_response_id", nullptr)},
            {"reasoning", echo("reasoning", {{"effort", nullptr}, {"summary", nullptr}})},
            {"store", echo("store", true)},
            {"temperature", echo("temperature", 1.0)},
            {"text", echo("text", {{"format", {{"type", "text"}}}})},
            {"tool_choice", echo("tool_choice", "auto")},
            {"tools", echo("tools", json::array())},
            {"top_p", echo("top_p", 1.0)},
            {"truncation", echo("truncation", "disabled")},
            {"usage", usage}};
  if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  return r;
}

// --- the stream ------------------------------------------------------------------------------

std::string ResponsesStream::event(const std::string& type, json data) {
  data["type"] = type;
  data["sequence_number"] = seq_++;
  return "event: " + type + "\ndata: " + dump(data) + "\n\n";
}

std::string ResponsesStream::start() {
  std::string out;
  const json r = response_object(h_, "in_progress", json::array(), nullptr);
  out += event("response.created", {{"response", r}});
  out += event("response.in_progress", {{"response", r}});
  return out;
}

void ResponsesStream::open_item(Open kind, json item, std::string& out) {
  close_item(out);
  open_ = kind;
  item_ = std::move(item);
  text_.clear();
  const int64_t index = (int64_t)output_.size();
  out += event("response.output_item.added", {{"output_index", index}, {"item", item_}});
  if (kind == Open::message)
    out += event("response.content_part.added", {{"item_id", item_["id"]},
                                                 {"output_index", index},
                                                 {"content_index", 0},
                                                 {"part", output_text_part("")}});
  if (kind == Open::reasoning)
    out += event("response.content_part.added",
                 {{"item_id", item_["id"]},
                  {"output_index", index},
                  {"content_index", 0},
                  {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
}

void ResponsesStream::close_item(std::string& out) {
  if (open_ == Open::none) return;
  const int64_t index = (int64_t)output_.size();
  const json id = item_["id"];
  switch (open_) {
    case Open::message: {
      out += event("response.output_text.done", {{"item_id", id},
                                                 {"output_index", index},
                                                 {"content_index", 0},
                                                 {"text", text_},
                                                 {"logprobs", json::array()}});
      const json part = output_text_part(text_);
      out +=
          event("response.content_part.done",
                {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
      item_["content"] = json::array({part});
      break;
    }
    case Open::reasoning: {
      out +=
          event("response.reasoning_text.done",
                {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", text_}});
      const json part = {{"type", "reasoning_text"}, {"text", text_}};
      out +=
          event("response.content_part.done",
                {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
      item_["content"] = json::array({part});
      break;
    }
    case Open::call:
      out += event("response.function_call_arguments.done", {{"item_id", id},
                                                             {"output_index", index},
                                                             {"name", item_["name"]},
                                                             {"arguments", text_}});
      item_["arguments"] = text_;
      break;
    case Open::none:
      break;
  }
  if (open_ != Open::reasoning) item_["status"] = "completed";  // a reasoning item has none
  out += event("response.output_item.done", {{"output_index", index}, {"item", item_}});
  output_.push_back(std::move(item_));
  item_ = json();
  open_ = Open::none;
  open_call_index_ = -1;
}

void ResponsesStream::text_delta(Open kind, const std::string& piece, std::string& out) {
  if (piece.empty()) return;
  if (open_ != kind) {
    if (kind == Open::reasoning)
      open_item(kind, reasoning_item(random_id("rs_"), ""), out);
    else
      open_item(kind, message_item(random_id("msg_"), "in_progress", json::array()), out);
  }
  text_ += piece;
  json data = {{"item_id", item_["id"]},
               {"output_index", (int64_t)output_.size()},
               {"content_index", 0},
               {"delta", piece}};
  if (kind == Open::message) data["logprobs"] = json::array();
  out +=
      event(kind == Open::message ? "response.output_text.delta" : "response.reasoning_text.delta",
            std::move(data));
}

std::string ResponsesStream::delta(const json& d) {
  std::string out;
  ChatDeltaVisitor v;
  v.reasoning = [&](const std::string& t) { text_delta(Open::reasoning, t, out); };
  v.content = [&](const std::string& t) { text_delta(Open::message, t, out); };
  v.call_start = [&](int64_t index, const std::string& id, const std::string& name) {
    open_item(Open::call, call_item(random_id("fc_"), id, name, "", "in_progress"), out);
    open_call_index_ = index;
  };
  v.call_arguments = [&](int64_t index, const std::string& piece) {
    if (open_ != Open::call || index != open_call_index_) return;
    text_ += piece;
    out += event(
        "response.function_call_arguments.delta",
        {{"item_id", item_["id"]}, {"output_index", (int64_t)output_.size()}, {"delta", piece}});
  };
  visit_chat_delta(d, v);
  return out;
}

std::string ResponsesStream::finish(const std::string& status, const json& usage,
                                    const json& extra) {
  std::string out;
  close_item(out);
  if (output_.empty()) {
    // A turn with no text and no call still answers with its (empty) message, as the whole
    // response does.
    open_item(Open::message, message_item(random_id("msg_"), "in_progress", json::array()), out);
    close_item(out);
  }
  json r = response_object(h_, status, output_, usage);
  if (extra.is_object()) r.update(extra);
  out += event(status == "incomplete" ? "response.incomplete" : "response.completed",
               {{"response", r}});
  final_ = std::move(r);
  return out;
}

std::string ResponsesStream::error(const ApiError& e) {
  return event("error", {{"code", e.code.empty() ? json(e.type) : json(e.code)},
                         {"message", e.message},
                         {"param", e.param.empty() ? json(nullptr) : json(e.param)}});
}

}  // namespace infercept::server
