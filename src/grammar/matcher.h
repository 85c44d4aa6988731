// Reads text against a Grammar byte by byte: a pushdown automaton whose stack frames are the
// open constructs (an object and where it is in its properties, a string and whether an
// escape is open, ...). Frames are immutable and live in an arena, each pointing at the frame
// below it, so a step that changes the top frame adds one frame and shares the rest of the
// stack: trying a byte costs no copy, and trying many (the token-mask walk, token_mask.h)
// only appends frames that are dropped afterwards (truncate()).
//
// Where the grammar is ambiguous (anyOf alternatives with a common start, an object's
// declared key against a free extra key) the matcher follows every reading at once: its
// state is a set of stacks ("heads"), usually one. A head of -1 is an empty stack: the root
// construct is complete and nothing may follow.
//
//   Matcher m(grammar);
//   if (!m.advance(token_bytes)) ...   // rejected: the state is unchanged
//   if (m.accepting()) ...             // the text so far is a complete instance
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace infercept::grammar {

struct Frame {
  int32_t parent = -1;  // the frame below, -1 at the bottom
  int32_t node = -1;    // Grammar::nodes
  int32_t st = 0;       // where in the node (per kind: matcher.cpp)
  int32_t a = 0;        // white space in the current gap; a bounded string's length
  uint64_t b = 0;       // object: next property | (key trie node or property << 32); counts
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> g);

  // Feeds `bytes`; false when the grammar rejects them, and then the state is unchanged.
  bool advance(std::string_view bytes);
  // The text so far is a complete instance (an end-of-turn token may come now).
  bool accepting() const { return accepting(heads_); }
  const Grammar& grammar() const { return *g_; }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return g_; }

  // --- for the token-mask walk (token_mask.cpp) ---
  const std::vector<int32_t>& heads() const { return heads_; }
  // The heads after `c` from each of `heads`, appended to `out` (frames added to the arena).
  void feed(std::span<const int32_t> heads, uint8_t c, std::vector<int32_t>& out);
  bool accepting(std::span<const int32_t> heads) const;
  // Every head is inside the body of a string of unbounded length, where a byte that is not
  // '"', '\\' or a control character leaves the state as it is.
  bool in_free_string(std::span<const int32_t> heads) const;
  // One head, inside the body of a string with a pattern (and no length count of its own):
  // its automaton, with the state in *state; null otherwise. What a run of plain bytes (as
  // for in_free_string) does there depends on the automaton's state alone.
  const ByteDfa* pattern_body(std::span<const int32_t> heads, int32_t* state) const;
  size_t arena_size() const { return arena_.size(); }
  void truncate(size_t n) { arena_.resize(n); }
  // The state as bytes (every head's stack, top to bottom): equal keys, equal futures.
  void state_key(std::string& out) const;

 private:
  void feed_one(int32_t head, uint8_t c, std::vector<int32_t>& out);
  void enter(int32_t parent, int32_t node, uint8_t c, std::vector<int32_t>& out);
  int32_t push(const Frame& f);
  int32_t settle(int32_t head) const;
  bool head_accepting(int32_t head) const;
  bool same_stack(int32_t x, int32_t y) const;
  void compact();

  std::shared_ptr<const Grammar> g_;
  std::vector<Frame> arena_;
  std::vector<int32_t> heads_, next_;
  size_t compact_at_ = 4096;
};

}  // namespace infercept::grammar
