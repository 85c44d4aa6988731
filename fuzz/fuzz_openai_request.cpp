// libFuzzer target for the OpenAI request parser: any byte string as a request body gives a
// typed request or an ApiError (a 4xx with a message), never a crash or an exception, for
// every endpoint's parser: chat completions (with tools, tool calls, the scripted-call
// extension), completions (text or token ids), the resume endpoint's messages, the sampling
// parameters of both, the Responses API's body (translated to a chat body, that parsed, the
// body echoed in a Response) and Anthropic's Messages body (translated, parsed). The error object
// and the parsed tool calls serialize.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "server/anthropic_api.h"
#include "server/openai_protocol.h"
#include "server/responses_api.h"

using namespace infercept;
using namespace infercept::server;

namespace {

volatile uint64_t g_sink;

uint64_t report(const std::optional<ApiError>& err) {
  if (!err) return 0;
  // Every refusal is a client error with a message (a 5xx would blame the server).
  if (err->status < 400 || err->status >= 500 || err->message.empty()) std::abort();
  return dump(error_body(*err)).size();
}

RequestLimits limits() {
  RequestLimits l;
  l.max_tokens = 512;
  l.context = 2048;
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  static const RequestLimits lim = limits();
  json body;
  uint64_t acc = report(parse_body(text, body));
  if (acc != 0) {
    g_sink = acc;
    return 0;
  }

  ChatRequest chat;
  const auto chat_err = parse_chat_request(body, lim, chat);
  acc += report(chat_err);
  if (!chat_err) {
    acc += report(parse_scripted_call(body, chat));
    for (const ChatMessage& m : chat.messages) {
      acc += m.content.size() + dump(tool_calls_json(m.tool_calls)).size();
    }
    acc += chat.tools.size();
  }

  CompletionRequest completion;
  acc += report(parse_completion_request(body, lim, completion));

  for (const bool is_chat : {true, false}) {
    SamplingParams params;
    bool max_tokens_given = false;
    acc += report(parse_sampling(body, lim, is_chat, params, max_tokens_given));
  }

  // The resume endpoint's tool results: "messages" alone.
  if (auto it = body.find("messages"); it != body.end()) {
    std::vector<ChatMessage> messages;
    acc += report(parse_messages(*it, "messages", messages));
  }
  // The Responses API: its body as a chat body, which the chat parser then takes or refuses.
  json responses_chat;
  const auto responses_err = responses_to_chat_body(body, nullptr, responses_chat);
  acc += report(responses_err);
  if (!responses_err) {
    ChatRequest from_responses;
    acc += report(parse_chat_request(responses_chat, lim, from_responses));
    acc += responses_store_requested(body) + instruction_messages(body);
    const ResponseHeader h{"resp_fuzz", 0, "m", body};
    acc += dump(response_object(h, "completed", json::array(), nullptr)).size();
  }
  // Anthropic's Messages API: the same, its errors in Anthropic's shape.
  json messages_chat;
  const auto messages_err = messages_to_chat_body(body, messages_chat);
  acc += report(messages_err);
  if (messages_err) acc += dump(anthropic_error_body(*messages_err)).size();
  if (!messages_err) {
    ChatRequest from_messages;
    acc += report(parse_chat_request(messages_chat, lim, from_messages));
  }
  acc += dump(body).size();
  g_sink = acc;
  return 0;
}
