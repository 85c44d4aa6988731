// Operations on ByteDfa (grammar.h), the automata of bounded numbers (number_range.h) and
// string patterns (regex.h): trimming to the states that can still be completed, merging
// equivalent states, bounding a string's length in characters, and marking the states where
// a string body takes any text (token_mask.h's fast path).
#pragma once

#include <cstdint>

#include "core/result.h"
#include "grammar/grammar.h"

namespace infercept::grammar {

// Keeps the states reachable from the start from which an accepting state can be reached,
// renumbered with the start at 0; transitions into removed states become -1. False when the
// start itself cannot reach an accepting state (the automaton accepts nothing).
bool trim_dfa(ByteDfa& d);

// Merges states with the same future (Moore's partition refinement); the start stays 0.
void minimize_dfa(ByteDfa& d);

// A byte that begins a UTF-8 character (not a continuation byte). A class never mixes the two.
inline bool starts_char(uint8_t b) {
  return b < 0x80 || b >= 0xC0;
}

// The texts of `d` whose length in characters (UTF-8 code points) is in [min_chars,
// max_chars] (max_chars -1: unbounded), trimmed and minimized. Errors: more than
// `max_states` states, or no text left.
Result<ByteDfa> limit_length(const ByteDfa& d, int32_t min_chars, int32_t max_chars,
                             int32_t max_states);

// Fills d.free: a state is free when every run of whole UTF-8 characters that a JSON string
// body holds unescaped (no '"', '\\' or control character) is accepted from it, and leads
// to free states.
void mark_free(ByteDfa& d);

}  // namespace infercept::grammar
