// The OpenAI wire format: request bodies parsed and validated into typed requests (every
// problem an ApiError naming the parameter, never an exception; openai_protocol.cpp), the
// parts of answers and a stream's chunks and event framing (openai_protocol_responses.cpp),
// and the OpenAI error object.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampling.h"
#include "tokenizer/chat_template.h"

namespace infercept::server {

using json = nlohmann::json;

// An error for the client: the HTTP status and the fields of the OpenAI error object.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty = null
  std::string code;   // empty = null
};

ApiError invalid_request(std::string message, std::string param = "", std::string code = "");
ApiError not_found(std::string message, std::string code = "not_found");
// {"error": {"message", "type", "param", "code"}}
json error_body(const ApiError& e);
// JSON text safe for any content (invalid UTF-8 replaced, never an exception).
std::string dump(const json& j);

// What the server lets a request ask for.
struct RequestLimits {
  int64_t max_tokens = 0;   // per request; 0 = the context
  int64_t context = 0;      // the engine's context (prompt + completion)
  SamplingParams defaults;  // sampling used where the request says nothing
};

enum class ToolChoice { none, automatic, required, named };

// Who may share a request's cached KV, as the client narrows it within its API key:
// OpenAI's `prompt_cache_key` and vLLM's `cache_salt` (each at most kMaxCacheFieldBytes;
// the salt, when given, not empty). The server's namespace is the key's owner and both.
struct CacheScope {
  std::string prompt_cache_key;
  std::string cache_salt;
};
constexpr size_t kMaxCacheFieldBytes = 512;
// The engine's cache namespace (GenerateRequest::cache_namespace) of `owner`'s request: one
// string that two requests share only when their owner, key and salt are all equal.
std::string cache_namespace(const std::string& owner, const CacheScope& scope);

// response_format: free text, any JSON object, or JSON of a schema.
struct ResponseFormat {
  enum class Kind { text, json_object, json_schema };
  Kind kind = Kind::text;
  json schema;  // json_schema: the schema (null = any JSON value)
  bool strict = false;
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  std::vector<ToolDefinition> tools;
  std::unordered_map<std::string, double> tool_hints_s;  // expected_duration_ms per tool, in s
  ToolChoice tool_choice = ToolChoice::automatic;
  std::string tool_choice_name;  // ToolChoice::named
  SamplingParams params;
  bool max_tokens_given = false;
  bool stream = false;
  bool include_usage = false;
  int32_t logprobs = -1;          // -1 off; otherwise top_logprobs (0..20)
  bool intercept = true;          // infercept extension: "intercept": false never keeps it paused
  bool return_token_ids = false;  // extension (vLLM's name): token ids in the choice
  // Extension for benchmarks: the turn generates exactly this many tokens (EOS ignored) and
  // then ends as a call to `intercept_tool` (default: the named tool_choice, else the first
  // tool), paused like any call; a call the model writes itself before that counts as usual.
  int64_t intercept_after_tokens = 0;
  std::string intercept_tool;
  // Extension: server-side tools this request may use ("server_tools": ["calculator"], or
  // true for all); the server runs their calls itself and continues the generation.
  std::vector<std::string> server_tools;
  bool all_server_tools = false;
  CacheScope cache;  // prompt_cache_key, cache_salt
  ResponseFormat response_format;
  bool parallel_tool_calls = true;  // false: a constrained turn holds one call at most
  // chat_template_kwargs (vLLM's and SGLang's extension): extra variables of the model's Jinja
  // template, as JSON object text ("" when absent), e.g. {"enable_thinking": false}. Names
  // the renderer sets (messages, tools, add_generation_prompt, bos_token, ...) are refused.
  std::string chat_template_kwargs_json;
};

struct CompletionRequest {
  std::string model;
  std::string prompt_text;             // when the prompt is text
  std::vector<int32_t> prompt_tokens;  // when the prompt is token ids
  SamplingParams params;
  bool max_tokens_given = false;
  bool stream = false;
  bool include_usage = false;
  int32_t logprobs = -1;  // -1 off; otherwise the number of top logprobs (0..5)
  bool return_token_ids = false;
  CacheScope cache;  // prompt_cache_key, cache_salt
};

// Sampling parameters shared by both endpoints: temperature, top_p, top_k, min_p, seed,
// stop, presence/frequency/repetition penalties, max_tokens (max_completion_tokens for
// chat), n (only 1). Errors name the parameter.
std::optional<ApiError> parse_sampling(const json& body, const RequestLimits& limits, bool chat,
                                       SamplingParams& out, bool& max_tokens_given);

std::optional<ApiError> parse_chat_request(const json& body, const RequestLimits& limits,
                                           ChatRequest& out);
// "intercept_after_tokens" / "intercept_tool" of a chat request or a resume (out.tools must be
// filled); resets both when absent.
std::optional<ApiError> parse_scripted_call(const json& body, ChatRequest& out);
std::optional<ApiError> parse_completion_request(const json& body, const RequestLimits& limits,
                                                 CompletionRequest& out);
// Messages only (the explicit resume endpoint's tool results): same rules as in a chat.
std::optional<ApiError> parse_messages(const json& arr, const std::string& param,
                                       std::vector<ChatMessage>& out);

// Parses a JSON body; a clear 400 when it is not JSON or not an object.
std::optional<ApiError> parse_body(const std::string& text, json& out);

// An id with a prefix and 24 random alphanumerics ("chatcmpl-...", "call_...").
std::string random_id(const std::string& prefix);

// A token's logprob entry in the chat format: {"token", "logprob", "bytes", "top_logprobs"}.
struct TokenInfo {
  std::string text;  // the token's bytes (may be part of a UTF-8 character)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
};
json chat_logprob_entry(const TokenInfo& t);

// The usage object; cached_tokens goes under prompt_tokens_details.
json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);

// A message's "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}].
json tool_calls_json(const std::vector<ToolCall>& calls);

// A chat message as the chat API writes it, what parse_messages reads back: role, content
// (null for an assistant turn that is only calls), reasoning_content, tool_calls, and a tool
// result's tool_call_id and name.
json chat_message_json(const ChatMessage& m);

// Logprobs of a chat choice ({"content": [entry...]}) and of a completion choice
// ({"tokens", "token_logprobs", "top_logprobs", "text_offset"}, offsets counted from
// `text_offset`, the bytes of text before these tokens).
json chat_logprobs_json(const std::vector<TokenInfo>& lps);
json completion_logprobs_json(const std::vector<TokenInfo>& lps, size_t text_offset);

// --- streaming (stream: true) -------------------------------------------------------------
// A stream is chunks, each a server-sent event `data: <json>\n\n`, ended by
// `data: [DONE]\n\n`. Chat: a first chunk with the role, content (and reasoning_content)
// deltas, each tool call as it is generated (a chunk with its index, id, type and name and
// arguments "", then chunks with pieces of its arguments), a last chunk with finish_reason,
// then the usage chunk when asked.

// What every chunk of one response repeats.
struct StreamHeader {
  std::string id;
  bool chat = true;  // object "chat.completion.chunk", else "text_completion"
  int64_t created = 0;
  std::string model;
  bool include_usage = false;  // stream_options.include_usage: every chunk has "usage": null
};

// {"id", "object", "created", "model", "choices": [choice]} (+ "usage": null).
json stream_chunk(const StreamHeader& h, json choice);
// The usage chunk: "choices": [] and the usage object.
json usage_chunk(const StreamHeader& h, json usage);
// A chat chunk's choice: {"index": 0, "delta", "logprobs", "finish_reason"}.
json chat_chunk_choice(json delta, json logprobs = nullptr, json finish_reason = nullptr);
// The first chat delta: {"role": "assistant", "content": ""}.
json chat_first_delta();
// The delta with calls, each complete: {"tool_calls": [{"index", "id", "type",
// "function": {"name", "arguments"}}]}, indexed from first_index.
json tool_calls_delta(const std::vector<ToolCall>& calls, size_t first_index = 0);
// A completion chunk's choice: {"index": 0, "text", "logprobs", "finish_reason"}.
json completion_chunk_choice(const std::string& text, json logprobs, json finish_reason = nullptr);
// One server-sent event: "data: " + the JSON + a blank line.
std::string sse_event(const json& j);
// The stream's end: "data: [DONE]" and a blank line.
std::string sse_done();

}  // namespace infercept::server
