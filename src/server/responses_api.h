// OpenAI's Responses API (POST /v1/responses) over the chat path: a request's input items
// become chat messages (function_call items the assistant's tool_calls, function_call_output
// items tool results, so a follow-up carries its call ids and continues its paused request as a
// chat follow-up does), and a chat turn comes back as a Response object or as the Responses
// stream's typed events. A stored response's conversation (response_store.h) goes before the
// input of a request that names it in previous_response_id; conversation objects are refused.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/openai_protocol.h"

namespace infercept::server {

// The chat-completions body equivalent to a Responses request body (its errors name the
// Responses parameter: "input[2].type"); the chat parser then checks it as any chat request.
// `prior` (null: none) is the conversation of the response previous_response_id names, as
// chat messages: they follow the instructions' system message and come before the input.
// Fields with no effect here (include, metadata, reasoning, truncation, user, ...) are
// ignored; ones that need state or tools this server lacks are a 400.
std::optional<ApiError> responses_to_chat_body(const json& body, const json* prior, json& chat);

// Whether the request asks for its Response to be kept ("store", default true; the body has
// passed responses_to_chat_body, which refuses a store that is not a boolean or null).
bool responses_store_requested(const json& body);

// What responses_to_chat_body put before the conversation: 1 when the request has
// instructions (a system message), else 0. The rest of the messages is what a stored
// response keeps.
size_t instruction_messages(const json& body);

// The Response's status for a chat finish_reason: "incomplete" when it ran out of
// max_output_tokens, else "completed".
std::string responses_status(const std::string& finish_reason);

// How a Response object repeats its request, and what it says of the turn.
struct ResponseHeader {
  std::string id;  // "resp_..."
  int64_t created_at = 0;
  std::string model;
  json request;  // the Responses request body (its settings are echoed)
};

// The turn's output items: a reasoning item, a message (when there is text or no call), a
// function_call per call (call_id the chat call's id).
json response_output_items(const std::string& content, const std::string& reasoning,
                           const std::vector<ToolCall>& calls);

// The Response object: status "completed", "incomplete" (incomplete_details: the reason,
// "max_output_tokens") or "in_progress" (the stream's first events), with its output and usage
// (null while in progress).
json response_object(const ResponseHeader& h, const std::string& status, const json& output,
                     const json& usage);

// The Responses usage object (input_tokens_details.cached_tokens).
json responses_usage(int64_t input_tokens, int64_t output_tokens, int64_t cached_tokens);

// A Responses stream: the chat turn's deltas ({"content"}, {"reasoning_content"},
// {"tool_calls": [...]}, as ChatTurnStreamer writes them) as typed server-sent events
// ("event: response.output_text.delta\ndata: {...}"), every item opened, filled and closed in
// order, each event numbered (sequence_number). The final Response's output is the items as
// streamed, so their ids are the ones the client saw.
class ResponsesStream {
 public:
  explicit ResponsesStream(ResponseHeader h) : h_(std::move(h)) {}

  // response.created and response.in_progress.
  std::string start();
  // The events for one chat delta.
  std::string delta(const json& chat_delta);
  // Closes what is open, then response.completed (or response.incomplete) with `usage`;
  // `extra` fields (the interception) join the Response.
  std::string finish(const std::string& status, const json& usage, const json& extra);
  // An error in the stream: an "error" event (the stream ends after it).
  std::string error(const ApiError& e);

  // The Response that finish() sent.
  const json& final_response() const { return final_; }

 private:
  enum class Open { none, reasoning, message, call };
  std::string event(const std::string& type, json data);
  void open_item(Open kind, json item, std::string& out);
  void close_item(std::string& out);
  // Text of a message or reasoning item: opens one when another (or none) is open.
  void text_delta(Open kind, const std::string& piece, std::string& out);

  ResponseHeader h_;
  int64_t seq_ = 0;
  json output_ = json::array();  // items closed so far, then all
  Open open_ = Open::none;
  json item_;                     // the open item
  std::string text_;              // its text (message, reasoning) or arguments (call)
  int64_t open_call_index_ = -1;  // the chat call index of the open call
  json final_;
};

}  // namespace infercept::server
