// The model's tool calls, in the format its chat template taught it, turned into OpenAI
// tool_calls: Hermes <tool_call> blocks (Qwen, SmolLM2), a Llama 3.1 JSON turn, Mistral
// [TOOL_CALLS], read by the engine's parser (engine/tool_call.h), so a turn the engine paused
// at is the turn reported here as calls, and a malformed call is text to both; a reasoning
// model's <think> block becomes reasoning_content. Also the text a generation is made to
// start with when the client requires a tool call, and the streaming of a chat turn as
// OpenAI deltas (ChatTurnStreamer).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "engine/tool_call.h"
#include "engine/tool_call_stream.h"
#include "grammar/tool_grammar.h"
#include "server/openai_protocol.h"
#include "tokenizer/chat_template.h"

namespace infercept::server {

struct AssistantTurn {
  std::string content;          // the text outside the calls (and the reasoning)
  std::string reasoning;        // a reasoning model's <think> block
  std::vector<ToolCall> calls;  // ids assigned ("call_...")
};

// A new id for a call in `format`: "call_" and 24 alphanumerics; Mistral's 9 alphanumerics
// (its templates refuse a follow-up whose ids are not).
std::string tool_call_id(ToolCallFormat format);

// Splits a whole assistant turn into content, reasoning and tool calls (parse_tool_turn), ids
// assigned. A call whose body is not JSON with a non-empty string "name" is not a call: its
// text stays in the content. `calls` off: no calls are read (no tools offered).
AssistantTurn parse_assistant_turn(const std::string& text, TurnFormat format, bool calls = true);
AssistantTurn parse_assistant_turn(const std::string& text, ChatTemplateKind kind);

// What the generation is made to start with for tool_choice "required" (a call of some
// tool) or "named" (a call of that tool), in `syntax` (tool_call_syntax); "" otherwise.
std::string forced_tool_prefix(const grammar::ToolCallSyntax& syntax, ToolChoice choice,
                               const std::string& name);

// A chat turn streamed: its text in as it is generated, the "delta" objects of OpenAI chunks
// out: {"content"}, {"reasoning_content"}, a call's first {"tool_calls": [{"index", "id",
// "type": "function", "function": {"name", "arguments": ""}}]} as soon as its name is
// complete, then {"tool_calls": [{"index", "function": {"arguments": piece}}]} as its
// arguments come. The content, reasoning and calls a stream adds up to are the whole-turn
// parse's (parse_assistant_turn), ids included (assign_ids).
//
// Calls named in `held` (server-side tools, which the server may run itself) are not
// streamed, nor any call after one: whether the client gets them is decided at the turn's
// end (held_calls). A call that breaks after it started (the stream cannot take it back)
// stays in the stream without its end; its text follows as content, as in the whole turn.
class ChatTurnStreamer {
 public:
  ChatTurnStreamer() : ChatTurnStreamer(TurnFormat{}, false) {}
  ChatTurnStreamer(TurnFormat format, bool calls, std::set<std::string> held = {});

  std::vector<json> push(const std::string& text);
  std::vector<json> finish();  // the turn ended: whatever was held back

  // The whole-turn parse's calls get the ids their streamed starts carried (the rest new ones).
  void assign_ids(std::vector<ToolCall>& calls) const;
  // Of the whole turn's calls (assigned ids), those not streamed, and the index the first of
  // them takes in the stream.
  std::vector<ToolCall> held_calls(const std::vector<ToolCall>& calls, size_t* first_index) const;

 private:
  std::vector<json> deltas(std::vector<TurnEvent>& events);

  ToolCallStream reader_;
  ToolCallFormat format_;  // of the ids
  std::set<std::string> held_;
  bool holding_ = false;  // a held call started: the rest of the turn's calls wait too
  struct Started {
    std::string id;    // "" when held
    size_t index = 0;  // the index it was announced with (among the announced calls)
    bool valid = false;
  };
  std::vector<Started> started_;  // by the reader's call index
  size_t announced_ = 0;          // indexes given to the client
};

// The parts of one ChatTurnStreamer delta, for the streams that re-shape them (the Responses
// and Messages APIs): reasoning and content text, a call's start (its index among the turn's
// announced calls, id, name) and a piece of a call's arguments. A part without a handler is
// skipped; an empty text or piece is not passed on.
struct ChatDeltaVisitor {
  std::function<void(const std::string&)> reasoning;
  std::function<void(const std::string&)> content;
  std::function<void(int64_t index, const std::string& id, const std::string& name)> call_start;
  std::function<void(int64_t index, const std::string& piece)> call_arguments;
};
void visit_chat_delta(const json& delta, const ChatDeltaVisitor& v);

}  // namespace infercept::server
