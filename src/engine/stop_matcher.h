// Stop strings over streamed text.
//
// Detokenized text arrives in pieces, and a stop string may straddle pieces ("Obs" +
// "ervation:"). StopMatcher emits only text that can no longer be part of a stop string:
// it holds back the longest suffix of what it has seen that is a prefix of some stop string,
// and releases it once the next piece rules the match out. When a stop string completes,
// push() returns the text before its earliest occurrence with stopped = true; the stop
// string itself is never emitted (OpenAI semantics) and later pushes return nothing.
// Input is assumed to be valid UTF-8 pieces; held-back text always starts where a stop
// string starts, so emitted text never ends inside a multi-byte character that a stop
// string begins with.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace infercept {

class StopMatcher {
 public:
  // Empty stop strings are ignored (SamplingParams::validate() rejects them upstream).
  explicit StopMatcher(std::vector<std::string> stops);

  struct Out {
    std::string text;  // safe to emit now
    bool stopped;      // a stop string completed; `text` is everything before it
  };

  Out push(std::string_view new_text);
  // At the end of generation (max_tokens, EOS): the held-back text, which turned out not to
  // be a stop string. Empty after a stop.
  std::string flush();

  bool stopped() const { return stopped_; }
  // Bytes currently held back.
  size_t pending_size() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // seen but not yet emitted
  bool stopped_ = false;
};

}  // namespace infercept
