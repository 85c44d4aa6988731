// The OpenAI wire format, answers side: logprobs, usage and tool calls as OpenAI writes
// them, and a stream's chunks and their server-sent-event framing (openai_protocol.h). The
// handlers say what goes out; the JSON of it is built here.
#include "server/openai_protocol.h"

namespace infercept::server {

json chat_logprob_entry(const TokenInfo& t) {
  auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back((int)c);
    return b;
  };
  json top = json::array();
  for (const auto& [text, lp] : t.top)
    top.push_back({{"token", text}, {"logprob", lp}, {"bytes", bytes(text)}});
  return {
      {"token", t.text}, {"logprob", t.logprob}, {"bytes", bytes(t.text)}, {"top_logprobs", top}};
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json arr = json::array();
  for (const ToolCall& c : calls)
    arr.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments_json}}}});
  return arr;
}

json chat_message_json(const ChatMessage& m) {
  json j = {{"role", m.role}};
  const bool only_calls = m.role == "assistant" && !m.tool_calls.empty() && m.content.empty();
  j["content"] = only_calls ? json(nullptr) : json(m.content);
  if (!m.reasoning_content.empty()) j["reasoning_content"] = m.reasoning_content;
  if (!m.tool_calls.empty()) j["tool_calls"] = tool_calls_json(m.tool_calls);
  if (m.role == "tool") {
    j["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) j["name"] = m.name;
  }
  return j;
}

json chat_logprobs_json(const std::vector<TokenInfo>& lps) {
  json content = json::array();
  for (const TokenInfo& t : lps) content.push_back(chat_logprob_entry(t));
  return {{"content", content}};
}

json completion_logprobs_json(const std::vector<TokenInfo>& lps, size_t text_offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offsets = json::array();
  size_t off = text_offset;
  for (const TokenInfo& t : lps) {
    tokens.push_back(t.text);
    token_lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [text, lp] : t.top) top[text] = lp;
    tops.push_back(top);
    offsets.push_back(off);
    off += t.text.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

// --- streaming ----------------------------------------------------------------------------

namespace {
json chunk_envelope(const StreamHeader& h, json choices) {
  return {{"id", h.id},
          {"object", h.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", h.created},
          {"model", h.model},
          {"choices", std::move(choices)}};
}
}  // namespace

json stream_chunk(const StreamHeader& h, json choice) {
  json c = chunk_envelope(h, json::array({std::move(choice)}));
  if (h.include_usage) c["usage"] = nullptr;
  return c;
}

json usage_chunk(const StreamHeader& h, json usage) {
  json c = chunk_envelope(h, json::array());
  c["usage"] = std::move(usage);
  return c;
}

json chat_chunk_choice(json delta, json logprobs, json finish_reason) {
  return {{"index", 0},
          {"delta", std::move(delta)},
          {"logprobs", std::move(logprobs)},
          {"finish_reason", std::move(finish_reason)}};
}

json chat_first_delta() {
  return {{"role", "assistant"}, {"content", ""}};
}

json tool_calls_delta(const std::vector<ToolCall>& calls, size_t first_index) {
  json arr = json::array();
  for (size_t i = 0; i < calls.size(); ++i)
    arr.push_back(
        {{"index", first_index + i},
         {"id", calls[i].id},
         {"type", "function"},
         {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments_json}}}});
  return {{"tool_calls", arr}};
}

json completion_chunk_choice(const std::string& text, json logprobs, json finish_reason) {
  return {{"index", 0},
          {"text", text},
          {"logprobs", std::move(logprobs)},
          {"finish_reason", std::move(finish_reason)}};
}

std::string sse_event(const json& j) {
  return "data: " + dump(j) + "\n\n";
}

std::string sse_done() {
  return "data: [DONE]\n\n";
}

}  // namespace infercept::server
