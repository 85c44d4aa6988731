// An assistant turn read as it is generated: text deltas in, events out (content, reasoning,
// a tool call's start with its name, pieces of its arguments, its end). The server streams
// these as OpenAI deltas; the whole-turn parser (tool_call.h) is this same reader fed the
// whole turn, so a streamed turn and a whole one cannot disagree.
//
// What it holds back: only what it must. In content, a possible partial opening marker at the
// end of the text ("<tool_c") and trailing white space (a turn with calls has its content
// right-trimmed); inside a call, the head up to the start of its arguments. A call starts
// once its name is complete and its arguments have begun (`{"name": "f", "arguments": {`);
// from there each piece of the arguments goes out as it arrives, raw, so the pieces of a call
// concatenate to exactly its final arguments text.
//
// Formats (TurnFormat::calls):
//   hermes:    <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any number, with
//              text around them; a block may lack its closing tag at the end of the turn.
//   json_turn: the whole turn is calls: [<|python_tag|>] {"name": ..., "parameters": {...}}
//              separated by ';' or white space. A turn that starts otherwise is text.
//   mistral:   [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (v0.3) or
//              [TOOL_CALLS]name[ARGS]{...} (later tokenizers; [CALL_ID]id may precede [ARGS]).
// With TurnFormat::reasoning, a <think>...</think> block at the start of the turn is
// reasoning, never content and never a call. Where the prompt opened the block itself
// (ThinkStart::inside), the turn is reasoning from its first byte up to </think>; where the
// prompt closed it (ThinkStart::after), the turn starts after it (a <think> is then text).
//
// The rule for a malformed call: it is text. A call that fails before it started (its body
// is not a JSON object with a non-empty string "name", or the turn ends first) gives nothing
// but content: Hermes and Mistral, the marker is text and reading goes on after it; a JSON
// turn, the whole turn is text. A call that fails after it started (its arguments break, junk
// before </tool_call>, the turn cut mid-call) ends with `valid` false and its text follows as
// content: an event stream cannot take back what it sent, so a reader of the stream sees the
// started call and the text; the whole-turn result has the text only. In a JSON turn every
// call's end waits for the turn's end, because one part that is not a call makes the whole
// turn text (the calls before it end not valid then).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tool_call.h"

namespace infercept {

struct TurnEvent {
  enum class Kind { content, reasoning, call_start, call_arguments, call_end };
  Kind kind = Kind::content;
  int32_t index = -1;  // call events: the call's place among the calls started in the turn
  std::string text;    // content, reasoning, an arguments piece; call_start: the name
  bool valid = true;   // call_end: false when the call failed after it started
};

class ToolCallStream {
 public:
  // `calls` off: the turn is read for reasoning only (no tools offered), never for calls.
  explicit ToolCallStream(TurnFormat format, bool calls = true);

  // More of the turn; appends the events it decides.
  void push(std::string_view delta, std::vector<TurnEvent>& out);
  // The turn ended: everything held back is decided.
  void finish(std::vector<TurnEvent>& out);

  int32_t calls_started() const { return n_started_; }

 private:
  enum class Mode {
    think_open,    // reasoning on, turn start: a <think> may come
    think,         // inside <think>
    after_think,   // white space after </think>
    start,         // the format's turn start
    content,       // text; calls open with the format's marker
    plain,         // text to the end of the turn (no more calls)
    hermes_open,   // after <tool_call>: white space, then the object
    json_open,     // JSON turn start: [<|python_tag|>] then an object, else plain
    json_sep,      // JSON turn, after a call: ';' and white space, then an object or the end
    mistral_open,  // after [TOOL_CALLS]: '[', '{' or a name
    mistral_list,  // v0.3 list: white space, then an object
    mistral_sep,   // v0.3 list, after a call: ',' or ']'
    mistral_name,  // name, [CALL_ID]id, [ARGS]
    obj_head,      // {"name": "...", "arguments": (fast path)
    obj_args,      // the arguments, streamed
    obj_tail,      // after the arguments: '}' or more keys
    obj_buffered,  // an object off the fast path: read whole, then judged
    hermes_close,  // after the object: white space, then </tool_call>
  };
  enum class Ctx { hermes, json_turn, mistral_list, mistral_single, mistral_name };

  // One decision at pos_; false when it needs more text (or, at the end, has none left).
  bool step(bool final, std::vector<TurnEvent>& out);
  void emit_content(std::string_view s, std::vector<TurnEvent>& out);
  void emit_reasoning(std::string_view s, std::vector<TurnEvent>& out);
  void begin_object(size_t at, Ctx ctx);
  void start_call(const std::string& name, std::vector<TurnEvent>& out);
  void end_call(bool valid, std::vector<TurnEvent>& out);
  // The object [obj_start_, end) closed: checked as a call, then what the format expects.
  void object_closed(size_t end, std::vector<TurnEvent>& out);
  // The call being read failed at byte p (not consumed).
  void fail(size_t p, std::vector<TurnEvent>& out);
  const std::string& marker() const;

  TurnFormat format_;
  bool calls_;
  std::string text_;  // the turn so far
  size_t pos_ = 0;    // text_ before pos_ is decided
  Mode mode_;
  std::string ws_hold_;    // trailing white space of the content, held back
  size_t turn_start_ = 0;  // JSON turn: where its text starts (all of it is content on failure)
  // The call being read.
  Ctx ctx_ = Ctx::hermes;
  size_t block_start_ = 0;  // its marker (or, later in a list, its object)
  size_t obj_start_ = 0;
  size_t args_start_ = 0;
  bool started_ = false;  // its call_start went out
  bool first_in_block_ = true;
  std::string name_;
  int depth_ = 0;  // the JSON scan: nesting, string state
  bool in_str_ = false, esc_ = false;
  int32_t n_started_ = 0;
  int32_t n_valid_ = 0;
  std::vector<int32_t> json_pending_;  // JSON turn: calls whose end waits for the turn's end
};

}  // namespace infercept
