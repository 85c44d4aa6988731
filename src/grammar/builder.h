// Builds a Grammar node by node (the schema compiler and the tool-call grammars use it), then
// finish() resolves aliases ($ref), flattens nested choices, and computes what the matcher
// reads from tables instead of working out per byte: which nodes match the empty string,
// which keys may come next in an object, where an object may close. finish() also refuses a
// grammar with a construct that can never be completed (a $ref cycle with no way out), so a
// matcher never walks into a dead end.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"
#include "grammar/grammar.h"

namespace infercept::grammar {

class GrammarBuilder {
 public:
  explicit GrammarBuilder(int32_t max_ws = 16) { g_.max_ws = max_ws; }

  int32_t literal(const std::vector<std::string>& texts);
  // dfa: an automaton from add_dfa (a string's pattern, a number's bounds), -1 for none.
  int32_t string(int32_t min_len = 0, int32_t max_len = -1, int32_t dfa = -1);
  int32_t number(bool integer, int32_t dfa = -1);
  int32_t add_dfa(ByteDfa d);
  // props' values must be nodes of this builder; additional -1 = closed.
  int32_t object(std::vector<Property> props, int32_t additional);
  int32_t array(int32_t items, int64_t min_items = 0, int64_t max_items = -1);
  int32_t choice(std::vector<int32_t> alts);
  int32_t seq(std::vector<int32_t> items);
  int32_t repeat(int32_t child, int64_t min, int64_t max);
  int32_t ws();
  // Any JSON value (and any JSON object): built once per builder.
  int32_t any_value();
  int32_t any_object();
  // A node to be filled later (set_alias): a $ref whose target is being compiled.
  int32_t reserve();
  void set_alias(int32_t node, int32_t target);

  int32_t max_ws() const { return g_.max_ws; }
  // The grammar rooted at `root`. Errors: an alias cycle, a node with no finite instance.
  Result<Grammar> finish(int32_t root) &&;

 private:
  int32_t add(Node n);
  Grammar g_;
  int32_t any_value_ = -1, any_object_ = -1;
};

}  // namespace infercept::grammar
