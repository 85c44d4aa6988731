#include "engine/request.h"

#include <algorithm>

#include "core/check.h"
#include "engine/tool_call.h"

namespace infercept {

Request::Request(uint64_t id, GenerateRequest req, uint64_t seed, const Tokenizer& tokenizer,
                 TurnFormat tool_format, const std::vector<int32_t>& markers, double arrival_time)
    : tokenizer_(tokenizer),
      tool_format_(tool_format),
      markers_(markers),
      sampler_(req.params, seed),
      detok_(tokenizer),
      stops_(req.params.stop) {
  seq.id = id;
  seq.arrival_time = arrival_time;
  configure(req, seed);
}

void Request::restart(GenerateRequest req, uint64_t seed) {
  (void)detok_.flush();
  configure(req, seed);
  json_tool_call_.reset();
}

// Everything a request takes from its GenerateRequest, for a new one and a restart alike.
void Request::configure(GenerateRequest& req, uint64_t seed) {
  params_ = req.params;
  sampler_ = Sampler(req.params, seed);
  stops_ = StopMatcher(req.params.stop);
  script_ = std::move(req.script);
  next_script_ = 0;
  sampled_since_resume_ = 0;
  n_sampled_ = 0;
  intercept_strings_ = std::move(req.intercept_strings);
  intercept_token_ids_ = std::move(req.intercept_token_ids);
  detect_tool_calls_ = req.detect_tool_calls;
  pause_at_tool_turn_end_ = req.pause_at_tool_turn_end;
  tool_call_text_ = req.tool_call_text || req.detect_tool_calls || req.pause_at_tool_turn_end;
  tool_hints_ = std::move(req.tool_duration_hints);
  logprobs_ = req.logprobs;
  constraint_ = std::move(req.constraint);
  tool_format_.think = req.think_start;
  matcher_.reset();
  awaiting_trigger_ = false;
  turn_text_.clear();
  if (constraint_ != nullptr) {
    if (constraint_->trigger.empty()) {
      matcher_.emplace(constraint_->grammar);
      // (EngineCore::validate checked that the grammar reads the prefix)
      CHECK(matcher_->advance(req.turn_prefix));
    } else {
      awaiting_trigger_ = true;
      turn_text_ = req.turn_prefix;
      look_for_trigger(turn_text_.size());  // the forced start may hold it already
    }
  }
  recent_text_ = std::move(req.turn_prefix);
  seq.n_prompt = (int64_t)req.prompt.size();
  seq.tokens = std::move(req.prompt);
  kept_tokens_ = 0;
  seq.n_cache_hit = 0;
  // A continued request under another namespace keeps its KV but adds nothing of it to the
  // cache: its indexed blocks belong to the old one.
  const uint64_t ns = namespace_id(req.cache_namespace);
  if (ns != seq.cache_ns) {
    seq.cache_keys.clear();
    seq.cache_stopped = !seq.blocks.blocks.empty();
    seq.cache_ns = ns;
  }
}

void Request::on_resume() {
  sampled_since_resume_ = 0;
  recent_text_.clear();
  // The constraint was the paused turn's; the turn after the tool's answer is free.
  constraint_.reset();
  matcher_.reset();
  awaiting_trigger_ = false;
}

// The matcher reads the sampled token (the mask allowed it); a trigger awaited is looked for
// in the turn's text, and from it on the grammar reads the text.
void Request::constrain(int32_t token) {
  if (tokenizer_.is_eog(token)) return;
  // A call's marker that is a control token writes its text (the grammar's vocabulary too).
  const bool marker = std::find(markers_.begin(), markers_.end(), token) != markers_.end();
  const std::string bytes = tokenizer_.token_to_bytes(token, /*render_special=*/marker);
  if (matcher_) {
    // Only a token outside the mask is refused (a sampler that ignored it): the constraint
    // is dropped rather than the request broken.
    if (!matcher_->advance(bytes)) matcher_.reset();
    return;
  }
  if (!awaiting_trigger_) return;
  turn_text_ += bytes;
  look_for_trigger(bytes.size());
}

void Request::look_for_trigger(size_t added) {
  size_t at = std::string::npos;
  if (constraint_->trigger_at_start) {
    const size_t b = turn_text_.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return;
    if (turn_text_.compare(b, constraint_->trigger.size(), constraint_->trigger) == 0)
      at = b;
    else if (turn_text_.size() - b >= constraint_->trigger.size())
      awaiting_trigger_ = false;
  } else {
    // Only where the new bytes could complete it: the text before was searched already.
    const size_t reach = added + constraint_->trigger.size() - 1;
    at = turn_text_.find(constraint_->trigger,
                         turn_text_.size() > reach ? turn_text_.size() - reach : 0);
  }
  if (at == std::string::npos) return;
  awaiting_trigger_ = false;
  matcher_.emplace(constraint_->grammar);
  // A call the grammar cannot read from its start (it began otherwise than the format's
  // calls do) stays free text; the parsers then read it as text.
  if (!matcher_->advance(std::string_view(turn_text_).substr(at))) matcher_.reset();
}

// The triggers in order: a JSON tool call completed by end-of-turn, the script, a token id, a
// string in the generated text, a Hermes tool call.
std::optional<InterceptionInfo> Request::fired_trigger() {
  InterceptionInfo info;
  auto hint_of = [&](const std::string& tool) -> std::optional<double> {
    if (auto h = tool_hints_.find(tool); h != tool_hints_.end()) return h->second;
    return std::nullopt;
  };
  if (json_tool_call_) {
    info.tool = *json_tool_call_;
    json_tool_call_.reset();
    info.hint = hint_of(info.tool);
    return info;
  }
  if (next_script_ < script_.size() &&
      sampled_since_resume_ >= script_[next_script_].after_generated) {
    info.tool = script_[next_script_].tool;
    info.hint = script_[next_script_].hint;
    ++next_script_;
    return info;
  }
  if (!seq.tokens.empty()) {
    const int32_t last = seq.tokens.back();
    for (int32_t t : intercept_token_ids_)
      if (t == last) {
        info.tool = "token:" + std::to_string(t);
        return info;
      }
  }
  for (const std::string& str : intercept_strings_)
    if (!str.empty() && recent_text_.find(str) != std::string::npos) {
      info.tool = str;
      return info;
    }
  // A call completes with the '>' of its closing tag: only then is the turn read again.
  if (detect_tool_calls_ && piece_closes_)
    if (auto call = find_tool_call(recent_text_, tool_format_)) {
      info.tool = call->name;
      info.hint = hint_of(info.tool);
      return info;
    }
  return std::nullopt;
}

TokenOutcome Request::on_token(int32_t token, int64_t limit, RequestOutput& out) {
  sampled_since_resume_++;
  n_sampled_++;
  out.prompt_tokens = seq.n_prompt;
  out.completion_tokens = n_sampled_;
  out.cached_tokens = std::min(seq.n_prompt, std::max(kept_tokens_, seq.n_cache_hit));
  FinishReason reason = FinishReason::none;
  const bool is_stop_token = (!params_.ignore_eos && tokenizer_.is_eog(token)) ||
                             std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(),
                                       token) != params_.stop_token_ids.end();
  if (is_stop_token) reason = FinishReason::stop;
  if (constraint_ != nullptr) constrain(token);
  if (is_stop_token && (detect_tool_calls_ || pause_at_tool_turn_end_)) {
    // The turn read as the server reads it (parse_tool_turn, the one parser): a JSON-turn
    // model's calls closed by end-of-turn pause the request instead of ending it; so do a
    // Hermes turn's calls when the request pauses at the turn's end (mid-turn, a Hermes
    // call pauses at its closing tag: fired_trigger). Malformed calls are text.
    const ParsedTurn turn = parse_tool_turn(recent_text_, tool_format_);
    if (!turn.calls.empty() &&
        (pause_at_tool_turn_end_ || tool_format_.calls != ToolCallFormat::hermes)) {
      json_tool_call_ = turn.calls.front().name;
      reason = FinishReason::none;
    }
  }
  std::string piece_text;
  if (!is_stop_token) {
    // A call's marker that is a control token ([TOOL_CALLS], <|python_tag|>) is text here:
    // the calls are read from the text.
    const bool marker = tool_call_text_ && !markers_.empty() &&
                        std::find(markers_.begin(), markers_.end(), token) != markers_.end();
    piece_text = marker ? detok_.flush() + tokenizer_.token_to_bytes(token, /*render_special=*/true)
                        : detok_.push(token);
  }
  piece_closes_ = piece_text.find('>') != std::string::npos;
  if (!intercept_strings_.empty() || detect_tool_calls_ || pause_at_tool_turn_end_)
    recent_text_ += piece_text;
  auto piece = stops_.push(piece_text);
  out.text = std::move(piece.text);
  if (piece.stopped) reason = FinishReason::stop;
  if (reason == FinishReason::none &&
      (n_sampled_ >= params_.max_tokens || (int64_t)seq.tokens.size() >= limit))
    reason = FinishReason::length;
  if (reason == FinishReason::none) {
    std::optional<InterceptionInfo> fired = fired_trigger();
    if (!fired) return TokenOutcome::go_on();
    // Whatever text was held back belongs to the call: emit it with the pause.
    out.text += stops_.flush();
    out.intercepted = true;
    out.tool = fired->tool;
    recent_text_.clear();
    sampled_since_resume_ = 0;
    return TokenOutcome::pause_for(std::move(*fired));
  }
  if (!stops_.stopped()) {
    // Held-back bytes and text turned out not to be a stop string: release them.
    auto rest = stops_.push(detok_.flush());
    out.text += rest.text;
    if (!rest.stopped) out.text += stops_.flush();
  }
  out.finish = reason;
  return TokenOutcome::finish();
}

}  // namespace infercept
