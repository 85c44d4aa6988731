// One request as the engine holds it beside its scheduler Sequence: how its tokens are
// sampled, turned into text, checked against stop strings and tool triggers, and what each
// sampled token means for it (go on, finish, pause for a tool). The step loop (step_loop.h)
// knows nothing of text; this is where a token becomes an answer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/sampling.h"
#include "engine/step_loop.h"
#include "engine/stop_matcher.h"
#include "engine/tool_call.h"
#include "grammar/matcher.h"
#include "sched/sequence.h"
#include "tokenizer/tokenizer.h"

namespace infercept {

class Request {
 public:
  // A request `id` from `req` (prompt, parameters, triggers); its sampler is seeded with
  // `seed`; `tool_format` is how the model writes tool calls (its chat template's), and
  // `markers` its marker tokens that are control tokens (rendered when calls are read).
  Request(uint64_t id, GenerateRequest req, uint64_t seed, const Tokenizer& tokenizer,
          TurnFormat tool_format, const std::vector<int32_t>& markers, double arrival_time);

  // The request starts over as `req` would (a paused request continued by a new request):
  // new prompt, parameters, triggers and counts; the sequence keeps its id, its place and
  // the KV the scheduler kept.
  void restart(GenerateRequest req, uint64_t seed);
  // Prompt tokens whose KV a continued paused request kept (EngineCore::continue_paused).
  void set_kept_tokens(int64_t n) { kept_tokens_ = n; }
  // The tool answered (its tokens are appended by the scheduler): triggers look at the text
  // generated from now on.
  void on_resume();

  // The token just appended to `seq` (sampled from the step's logits): fills `out` (text, the
  // finish reason, the tool on a pause) and says what becomes of the request. `limit`: the
  // most tokens the sequence may hold.
  TokenOutcome on_token(int32_t token, int64_t limit, RequestOutput& out);

  // The logits row must reach the host for it (penalties and logprobs need the row).
  bool needs_host_logits() const { return params_.has_penalties() || logprobs_ >= 0; }
  // The grammar the next token must keep to (GenerateRequest::constraint), when one is in
  // force: its state after every token accepted so far. Null otherwise.
  grammar::Matcher* matcher() { return matcher_ ? &*matcher_ : nullptr; }
  grammar::MaskCache* mask_cache() const {
    return constraint_ ? constraint_->cache.get() : nullptr;
  }
  std::vector<uint64_t>& mask() { return mask_; }
  int32_t logprobs() const { return logprobs_; }
  const SamplingParams& params() const { return params_; }
  Sampler& sampler() { return sampler_; }
  int64_t n_sampled() const { return n_sampled_; }

  Sequence seq;

 private:
  void configure(GenerateRequest& req, uint64_t seed);
  // The tool trigger that fired on the token just sampled, if any.
  std::optional<InterceptionInfo> fired_trigger();

  const Tokenizer& tokenizer_;
  TurnFormat tool_format_;
  const std::vector<int32_t>& markers_;
  SamplingParams params_;
  Sampler sampler_;
  StreamingDetokenizer detok_;
  StopMatcher stops_;
  std::vector<ScriptedInterception> script_;
  size_t next_script_ = 0;
  int64_t sampled_since_resume_ = 0;
  int64_t n_sampled_ = 0;  // tokens the model generated (tool results excluded)
  std::vector<std::string> intercept_strings_;
  std::vector<int32_t> intercept_token_ids_;
  bool detect_tool_calls_ = false;
  bool pause_at_tool_turn_end_ = false;
  bool tool_call_text_ = false;  // markers rendered (GenerateRequest::tool_call_text)
  bool piece_closes_ = false;    // the last piece holds a '>' (a </tool_call> may be complete)
  std::unordered_map<std::string, double> tool_hints_;
  int32_t logprobs_ = -1;
  int64_t kept_tokens_ = 0;
  std::string recent_text_;                    // generated text since the last pause (triggers)
  std::optional<std::string> json_tool_call_;  // a tool call just completed by end-of-turn
  // Constrained decoding: the constraint, its matcher once in force, the turn's text while a
  // trigger is awaited, the next token's mask (filled by the engine's mask worker).
  void constrain(int32_t token);
  void look_for_trigger(size_t added);  // `added`: bytes just appended to turn_text_
  std::shared_ptr<const GenerationConstraint> constraint_;
  std::optional<grammar::Matcher> matcher_;
  bool awaiting_trigger_ = false;
  std::string turn_text_;
  std::vector<uint64_t> mask_;
};

}  // namespace infercept
