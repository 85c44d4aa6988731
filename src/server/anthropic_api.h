// Anthropic's Messages API (POST /v1/messages, what Claude Code and the `anthropic` SDKs speak)
// over the chat path, as the Responses API is (responses_api.h): a request's messages and
// content blocks become chat messages (tool_use blocks the assistant's tool_calls with their
// ids, tool_result blocks tool messages, so a follow-up carries its call ids and continues
// its paused request as a chat follow-up does), and a chat turn comes back as a Message or as
// the Messages stream's events. Errors are Anthropic's error object.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/openai_protocol.h"

namespace infercept::server {

// The chat-completions body equivalent to a Messages request body (errors name the Messages
// parameter: "messages[1].content[0].type"); the chat parser then checks it. max_tokens is
// required, as Anthropic requires it. metadata, thinking, service_tier, cache_control and the
// like are ignored; server tools (web_search_..., bash_..., ...) and non-text content (images,
// documents) are a 400.
std::optional<ApiError> messages_to_chat_body(const json& body, json& chat);

// {"type": "error", "error": {"type", "message"}}, Anthropic's error types by status.
json anthropic_error_body(const ApiError& e);

// The Message's stop_reason for a chat finish_reason: end_turn, max_tokens, tool_use.
std::string anthropic_stop_reason(const std::string& finish_reason);

// Anthropic counts input_tokens without the cached ones (cache_read_input_tokens).
json anthropic_usage(int64_t prompt_tokens, int64_t output_tokens, int64_t cached_tokens);

// The turn's content blocks: a thinking block, a text block (when there is text or no call),
// a tool_use block per call (its input the arguments as a JSON object).
json anthropic_content(const std::string& text, const std::string& reasoning,
                       const std::vector<ToolCall>& calls);

// The Message object.
json anthropic_message(const std::string& id, const std::string& model, json content,
                       const std::string& stop_reason, json usage);

// A Messages stream: the chat turn's deltas ({"content"}, {"reasoning_content"},
// {"tool_calls": [...]}) as Anthropic's events (message_start; per block content_block_start,
// its deltas (text_delta, thinking_delta, input_json_delta), content_block_stop; message_delta
// with the stop reason and usage; message_stop), each "event: <type>\ndata: {...}".
class AnthropicStream {
 public:
  AnthropicStream(std::string id, std::string model)
      : id_(std::move(id)), model_(std::move(model)) {}

  std::string start(const json& usage);
  std::string delta(const json& chat_delta);
  std::string finish(const std::string& stop_reason, const json& usage, const json& extra);
  std::string error(const ApiError& e);

 private:
  enum class Open { none, thinking, text, tool };
  std::string event(const std::string& type, json data) const;
  void open_block(Open kind, json block, std::string& out);
  void close_block(std::string& out);
  void text_delta(Open kind, const std::string& piece, std::string& out);

  std::string id_, model_;
  int64_t index_ = -1;  // of the open (or last) block
  Open open_ = Open::none;
  int64_t open_call_index_ = -1;
};

}  // namespace infercept::server
