#include "engine/tool_call_stream.h"

#include <nlohmann/json.hpp>

#include "core/json_depth.h"

namespace infercept {

namespace {

const std::string kHermesOpen = "<tool_call>";
const std::string kHermesClose = "</tool_call>";
const std::string kPythonTag = "<|python_tag|>";
const std::string kMistralCalls = "[TOOL_CALLS]";
const std::string kMistralArgs = "[ARGS]";
const std::string kMistralCallId = "[CALL_ID]";
const std::string kThinkOpen = "<think>";
const std::string kThinkClose = "</think>";

// A call's head longer than this is not a name being written: the object is read whole.
constexpr size_t kMaxHead = 1024;
// A Mistral name (or call id) longer than this is not one: the marker is text.
constexpr size_t kMaxMistralName = 256;

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// The longest suffix of s that is a proper prefix of `marker` (a marker that may be arriving).
size_t partial_marker(std::string_view s, const std::string& marker) {
  for (size_t k = std::min(marker.size() - 1, s.size()); k > 0; --k)
    if (s.compare(s.size() - k, k, marker, 0, k) == 0) return k;
  return 0;
}

enum class Match { more, yes, no };

// s[i..] starts with `lit`: yes (i moved past it), no, or more (s ends inside it).
Match expect(std::string_view s, size_t& i, std::string_view lit) {
  const size_t n = std::min(lit.size(), s.size() - i);
  if (s.compare(i, n, lit, 0, n) != 0) return Match::no;
  if (n < lit.size()) return Match::more;
  i += n;
  return Match::yes;
}

struct Head {
  Match match = Match::more;
  std::string name;
  size_t args = 0;  // offset of the arguments' '{'
};

// The fast path of a call object: {"name": "<name>", "arguments"|"parameters": {
// `s` starts at the object's '{'.
Head match_head(std::string_view s) {
  Head h;
  size_t i = 1;
  auto ws = [&] {
    i = skip_space(s, i);
    return i < s.size();
  };
  auto lit = [&](std::string_view l) {
    h.match = expect(s, i, l);
    return h.match == Match::yes;
  };
  auto fail = [&](Match m) {
    h.match = m;
    return h;
  };
  if (!ws()) return fail(Match::more);
  if (!lit("\"name\"")) return h;
  if (!ws()) return fail(Match::more);
  if (!lit(":")) return h;
  if (!ws()) return fail(Match::more);
  if (s[i] != '"') return fail(Match::no);
  size_t e = i + 1;
  while (e < s.size() && s[e] != '"') e += s[e] == '\\' ? 2 : 1;
  if (e >= s.size()) return fail(Match::more);
  const auto name = nlohmann::json::parse(s.substr(i, e + 1 - i), nullptr, false);
  if (!name.is_string() || name.get<std::string>().empty()) return fail(Match::no);
  i = e + 1;
  if (!ws()) return fail(Match::more);
  if (!lit(",")) return h;
  if (!ws()) return fail(Match::more);
  const size_t key = i;
  if (!lit("\"arguments\"")) {
    i = key;
    if (h.match == Match::no && !lit("\"parameters\"")) return h;
    if (h.match == Match::more) return h;
  }
  if (!ws()) return fail(Match::more);
  if (!lit(":")) return h;
  if (!ws()) return fail(Match::more);
  if (s[i] != '{') return fail(Match::no);  // a string or null: read whole
  h.match = Match::yes;
  h.name = name.get<std::string>();
  h.args = i;
  return h;
}

}  // namespace

// Where the prompt left the turn decides the first mode: inside a block it opened, the turn
// is reasoning whatever the template is otherwise known for; after a block it closed, there
// is none to look for.
ToolCallStream::ToolCallStream(TurnFormat format, bool calls)
    : format_(format),
      calls_(calls),
      mode_(format.think == ThinkStart::inside                       ? Mode::think
            : format.think == ThinkStart::after || !format.reasoning ? Mode::start
                                                                     : Mode::think_open) {}

const std::string& ToolCallStream::marker() const {
  return format_.calls == ToolCallFormat::mistral ? kMistralCalls : kHermesOpen;
}

void ToolCallStream::push(std::string_view delta, std::vector<TurnEvent>& out) {
  text_ += delta;
  while (step(false, out)) {
  }
}

void ToolCallStream::finish(std::vector<TurnEvent>& out) {
  while (step(true, out)) {
  }
  for (int32_t i : json_pending_) {
    ++n_valid_;
    out.push_back({TurnEvent::Kind::call_end, i, {}, true});
  }
  json_pending_.clear();
  // A turn with calls has its content right-trimmed; without, it is the text unchanged.
  if (n_valid_ == 0 && !ws_hold_.empty()) out.push_back({TurnEvent::Kind::content, -1, ws_hold_});
  ws_hold_.clear();
}

// Content goes out as it comes, less its trailing white space while calls may follow.
void ToolCallStream::emit_content(std::string_view s, std::vector<TurnEvent>& out) {
  if (s.empty()) return;
  size_t e = s.size();
  if (calls_)
    while (e > 0 && is_space(s[e - 1])) --e;
  if (e == 0) {
    ws_hold_ += s;
    return;
  }
  std::string piece = std::move(ws_hold_);
  piece += s.substr(0, e);
  ws_hold_ = std::string(s.substr(e));
  if (!out.empty() && out.back().kind == TurnEvent::Kind::content)
    out.back().text += piece;
  else
    out.push_back({TurnEvent::Kind::content, -1, std::move(piece)});
}

void ToolCallStream::emit_reasoning(std::string_view s, std::vector<TurnEvent>& out) {
  if (s.empty()) return;
  if (!out.empty() && out.back().kind == TurnEvent::Kind::reasoning)
    out.back().text += s;
  else
    out.push_back({TurnEvent::Kind::reasoning, -1, std::string(s)});
}

void ToolCallStream::begin_object(size_t at, Ctx ctx) {
  ctx_ = ctx;
  obj_start_ = at;
  pos_ = at;
  started_ = false;
  mode_ = Mode::obj_head;
}

void ToolCallStream::start_call(const std::string& name, std::vector<TurnEvent>& out) {
  started_ = true;
  out.push_back({TurnEvent::Kind::call_start, n_started_++, name});
}

void ToolCallStream::end_call(bool valid, std::vector<TurnEvent>& out) {
  if (valid) ++n_valid_;
  out.push_back({TurnEvent::Kind::call_end, n_started_ - 1, {}, valid});
}

void ToolCallStream::fail(size_t p, std::vector<TurnEvent>& out) {
  if (ctx_ == Ctx::json_turn) {
    // One part that is not a call: the whole turn is text, the calls before it too.
    for (int32_t i : json_pending_) out.push_back({TurnEvent::Kind::call_end, i, {}, false});
    json_pending_.clear();
    if (started_) out.push_back({TurnEvent::Kind::call_end, n_started_ - 1, {}, false});
    started_ = false;
    pos_ = turn_start_;
    mode_ = Mode::plain;
    return;
  }
  if (!started_) {
    // Nothing went out for it: the marker is text and reading goes on after it (a later
    // element of a Mistral list: from the element on).
    if (first_in_block_) {
      const size_t m = block_start_ + marker().size();
      emit_content(std::string_view(text_).substr(block_start_, m - block_start_), out);
      pos_ = m;
    } else {
      pos_ = obj_start_;
    }
    mode_ = Mode::content;
    return;
  }
  // It started: it ends not valid, and its text (from its marker) is content.
  end_call(false, out);
  started_ = false;
  emit_content(std::string_view(text_).substr(block_start_, p - block_start_), out);
  pos_ = p;
  mode_ = Mode::content;
}

void ToolCallStream::object_closed(size_t end, std::vector<TurnEvent>& out) {
  const std::string_view obj = std::string_view(text_).substr(obj_start_, end - obj_start_);
  auto call = tool_call_from_json(obj);
  if (!call) return fail(started_ ? end : obj_start_, out);
  if (!started_) {
    // Off the fast path: it goes out whole now.
    start_call(call->name, out);
    out.push_back({TurnEvent::Kind::call_arguments, n_started_ - 1, call->arguments_json});
  }
  pos_ = end;
  switch (ctx_) {
    case Ctx::hermes:
      mode_ = Mode::hermes_close;
      return;
    case Ctx::json_turn:
      json_pending_.push_back(n_started_ - 1);
      started_ = false;
      mode_ = Mode::json_sep;
      return;
    case Ctx::mistral_list:
      end_call(true, out);
      started_ = false;
      mode_ = Mode::mistral_sep;
      return;
    case Ctx::mistral_single:
    case Ctx::mistral_name:
      end_call(true, out);
      started_ = false;
      mode_ = Mode::content;
      return;
  }
}

bool ToolCallStream::step(bool final, std::vector<TurnEvent>& out) {
  const std::string_view t = text_;
  const size_t n = t.size();
  switch (mode_) {
    case Mode::think_open: {
      const size_t i = skip_space(t, pos_);
      size_t j = i;
      const Match m = expect(t, j, kThinkOpen);
      if (m == Match::more && !final) return false;
      if (m == Match::yes) {
        pos_ = j;
        mode_ = Mode::think;
      } else {
        mode_ = Mode::start;
      }
      return true;
    }
    case Mode::think: {
      const size_t c = t.find(kThinkClose, pos_);
      if (c != std::string_view::npos) {
        emit_reasoning(t.substr(pos_, c - pos_), out);
        pos_ = c + kThinkClose.size();
        mode_ = Mode::after_think;
        return true;
      }
      const size_t safe = final ? n : n - partial_marker(t.substr(pos_), kThinkClose);
      emit_reasoning(t.substr(pos_, safe - pos_), out);
      pos_ = safe;
      return false;
    }
    case Mode::after_think: {
      pos_ = skip_space(t, pos_);
      if (pos_ == n) return false;
      mode_ = Mode::start;
      return true;
    }
    case Mode::start:
      turn_start_ = pos_;
      mode_ = !calls_                                      ? Mode::plain
              : format_.calls == ToolCallFormat::json_turn ? Mode::json_open
                                                           : Mode::content;
      return true;
    case Mode::plain:
      emit_content(t.substr(pos_), out);
      pos_ = n;
      return false;
    case Mode::content: {
      const std::string& mk = marker();
      const size_t a = t.find(mk, pos_);
      if (a != std::string_view::npos) {
        emit_content(t.substr(pos_, a - pos_), out);
        block_start_ = a;
        first_in_block_ = true;
        pos_ = a + mk.size();
        mode_ = format_.calls == ToolCallFormat::mistral ? Mode::mistral_open : Mode::hermes_open;
        return true;
      }
      const size_t safe = final ? n : n - partial_marker(t.substr(pos_), mk);
      emit_content(t.substr(pos_, safe - pos_), out);
      pos_ = safe;
      return false;
    }
    case Mode::hermes_open: {
      const size_t i = skip_space(t, pos_);
      if (i == n) {
        if (!final) return false;
        fail(n, out);
        return true;
      }
      if (t[i] != '{') {
        fail(i, out);
        return true;
      }
      begin_object(i, Ctx::hermes);
      return true;
    }
    case Mode::json_open: {
      size_t i = skip_space(t, pos_);
      if (i == n) {
        if (!final) return false;
        mode_ = Mode::plain;  // blank: content (white space)
        return true;
      }
      size_t j = i;
      const Match tag = expect(t, j, kPythonTag);
      if (tag == Match::more && !final) return false;
      if (tag == Match::yes) {
        i = skip_space(t, j);
        if (i == n && !final) return false;
      }
      if (i < n && t[i] == '{') {
        begin_object(i, Ctx::json_turn);
        return true;
      }
      mode_ = Mode::plain;
      return true;
    }
    case Mode::json_sep: {
      size_t i = pos_;
      while (i < n && (is_space(t[i]) || t[i] == ';')) ++i;
      if (i == n) return false;  // the turn's end (finish) ends the calls
      if (t[i] == '{') {
        begin_object(i, Ctx::json_turn);
        return true;
      }
      ctx_ = Ctx::json_turn;
      fail(i, out);
      return true;
    }
    case Mode::mistral_open: {
      const size_t i = skip_space(t, pos_);
      if (i == n) {
        if (!final) return false;
        ctx_ = Ctx::mistral_single;
        started_ = false;
        fail(n, out);
        return true;
      }
      if (t[i] == '[') {
        pos_ = i + 1;
        mode_ = Mode::mistral_list;
      } else if (t[i] == '{') {
        begin_object(i, Ctx::mistral_single);
      } else {
        pos_ = i;
        mode_ = Mode::mistral_name;
      }
      return true;
    }
    case Mode::mistral_list: {
      const size_t i = skip_space(t, pos_);
      if (i == n && !final) return false;
      if (!first_in_block_) block_start_ = i;  // a later element's text starts at itself
      if (i < n && t[i] == '{') {
        begin_object(i, Ctx::mistral_list);
        return true;
      }
      ctx_ = Ctx::mistral_list;
      started_ = false;
      obj_start_ = i;
      fail(i, out);
      return true;
    }
    case Mode::mistral_sep: {
      const size_t i = skip_space(t, pos_);
      if (i == n) {
        if (!final) return false;
        pos_ = i;
        mode_ = Mode::content;
        return true;
      }
      if (t[i] == ',') {
        first_in_block_ = false;
        pos_ = i + 1;
        mode_ = Mode::mistral_list;
      } else if (t[i] == ']') {
        pos_ = i + 1;
        mode_ = Mode::content;
      } else {
        pos_ = i;  // the list is over; what follows is content
        mode_ = Mode::content;
      }
      return true;
    }
    case Mode::mistral_name: {
      ctx_ = Ctx::mistral_name;
      started_ = false;
      // name, then [ARGS] (or [CALL_ID]id[ARGS]), then the arguments' '{'.
      const size_t args = t.find(kMistralArgs, pos_);
      const size_t id = t.find(kMistralCallId, pos_);
      const size_t name_end = std::min(args, id);
      if (name_end == std::string_view::npos) {
        if (!final && n - pos_ <= kMaxMistralName + kMistralCallId.size()) return false;
        fail(pos_, out);
        return true;
      }
      const std::string_view name = t.substr(pos_, name_end - pos_);
      bool name_ok = !name.empty() && name.size() <= kMaxMistralName;
      for (char c : name) name_ok = name_ok && !is_space(c) && c != '[' && c != '{';
      if (name_ok && id < args) {
        if (args == std::string_view::npos && !final &&
            n - id <= kMistralCallId.size() + kMaxMistralName + kMistralArgs.size())
          return false;  // the call id is still coming
        name_ok =
            args != std::string_view::npos && args - id <= kMistralCallId.size() + kMaxMistralName;
      }
      if (!name_ok) {
        fail(pos_, out);
        return true;
      }
      const size_t i = skip_space(t, args + kMistralArgs.size());
      if (i == n) {
        if (!final) return false;
        fail(pos_, out);
        return true;
      }
      if (t[i] != '{') {
        fail(pos_, out);
        return true;
      }
      obj_start_ = i;
      args_start_ = i;
      start_call(std::string(name), out);
      depth_ = 0;
      in_str_ = esc_ = false;
      pos_ = i;
      mode_ = Mode::obj_args;
      return true;
    }
    case Mode::obj_head: {
      const Head h = match_head(t.substr(obj_start_));
      if (h.match == Match::more && !final && n - obj_start_ <= kMaxHead) return false;
      if (h.match == Match::yes) {
        args_start_ = obj_start_ + h.args;
        start_call(h.name, out);
        depth_ = 0;
        in_str_ = esc_ = false;
        pos_ = args_start_;
        mode_ = Mode::obj_args;
      } else {
        depth_ = 0;
        in_str_ = esc_ = false;
        pos_ = obj_start_;
        mode_ = Mode::obj_buffered;
      }
      return true;
    }
    case Mode::obj_args:
    case Mode::obj_buffered: {
      // The value's end: strings, escapes and nesting followed byte by byte.
      size_t i = pos_;
      bool closed = false, too_deep = false;
      for (; i < n; ++i) {
        const char c = t[i];
        if (in_str_) {
          if (esc_)
            esc_ = false;
          else if (c == '\\')
            esc_ = true;
          else if (c == '"')
            in_str_ = false;
        } else if (c == '"') {
          in_str_ = true;
        } else if (c == '{' || c == '[') {
          if (++depth_ > kMaxJsonDepth + 1) {
            too_deep = true;
            break;
          }
        } else if (c == '}' || c == ']') {
          if (--depth_ == 0) {
            closed = true;
            ++i;
            break;
          }
        }
      }
      if (mode_ == Mode::obj_args && i > pos_)
        out.push_back({TurnEvent::Kind::call_arguments, n_started_ - 1,
                       std::string(t.substr(pos_, i - pos_))});
      pos_ = i;
      if (too_deep || (!closed && final)) {
        fail(started_ ? i : obj_start_, out);
        return true;
      }
      if (!closed) return false;
      if (mode_ == Mode::obj_buffered) {
        object_closed(i, out);
      } else if (ctx_ == Ctx::mistral_name) {
        // The arguments are the whole call: they must be JSON.
        const std::string_view args = t.substr(args_start_, i - args_start_);
        if (!json_depth_ok(args) || !nlohmann::json::accept(args)) {
          fail(i, out);
          return true;
        }
        end_call(true, out);
        started_ = false;
        mode_ = Mode::content;
      } else {
        mode_ = Mode::obj_tail;
      }
      return true;
    }
    case Mode::obj_tail: {
      const size_t i = skip_space(t, pos_);
      if (i == n) {
        if (!final) return false;
        fail(n, out);
        return true;
      }
      if (t[i] == '}') {
        object_closed(i + 1, out);
        return true;
      }
      if (t[i] != ',') {
        fail(i, out);
        return true;
      }
      // More keys after the arguments: read on to the object's end, then judge it whole.
      depth_ = 1;
      in_str_ = esc_ = false;
      pos_ = i;
      mode_ = Mode::obj_buffered;
      return true;
    }
    case Mode::hermes_close: {
      const size_t i = skip_space(t, pos_);
      size_t j = i;
      const Match m = expect(t, j, kHermesClose);
      if (m == Match::yes || (final && i == n)) {
        end_call(true, out);
        started_ = false;
        pos_ = j;
        mode_ = Mode::content;
        return true;
      }
      if (m == Match::more && !final) return false;
      fail(i, out);
      return true;
    }
  }
  return false;
}

}  // namespace infercept
