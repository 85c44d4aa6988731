// A compiled grammar: what the constrained decoder lets a model write (docs/DESIGN.md,
// "Constrained decoding").
//
// The formalism is a pushdown automaton over bytes whose stack holds one frame per open
// construct (matcher.h). The grammar is a graph of nodes, each a construct the matcher knows
// how to read byte by byte: a JSON object with its properties in schema order, an array, a
// string, a number, a set of literal texts (enum, const, true/false/null, an object's keys),
// a choice (anyOf, type lists), bounded whitespace, and, above the JSON value, a sequence and
// a repetition (a tool call's opening and closing text, several calls in one turn). Nodes
// refer to each other by index, so a recursive schema ($ref to an enclosing definition) is
// a cycle in the graph and nests on the stack as deep as the text does.
//
// Compile it once (json_schema.h, tool_grammar.h); it is immutable afterwards and shared by
// every request that uses it, each with its own Matcher.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace infercept::grammar {

enum class NodeKind : uint8_t {
  literal,  // one of a set of byte strings (trie)
  string,   // a JSON string, optionally of bounded length
  number,   // a JSON number (or integer)
  object,   // a JSON object: declared properties in order, optional extra properties
  array,    // a JSON array of one item schema
  choice,   // one of several nodes (never nested: alternatives are flattened)
  seq,      // nodes one after another
  repeat,   // a node min..max times
  ws,       // 0..max_ws bytes of JSON white space
  alias,    // compile-time only ($ref): replaced by its target before use
};

// A byte trie of literal texts. For an object's keys, `leaf` is the property index and
// `below` the set of properties whose keys pass through the node (so a key prefix is only
// allowed when some property it could become may come next).
struct TrieNode {
  std::vector<std::pair<uint8_t, int32_t>> kids;  // (byte, node), sorted by byte
  int32_t leaf = -1;                              // >= 0: a text ends here
  uint64_t below = 0;                             // object keys: properties below this node
  int32_t child(uint8_t b) const {
    for (const auto& [kb, n] : kids)
      if (kb == b) return n;
    return -1;
  }
};

// A deterministic automaton over bytes: a bounded number's text (number_range.h) or the
// decoded value of a string with a `pattern` (regex.h). Built trimmed: every transition leads
// to a state from which an accepting one can be reached, so a matcher following it never
// walks into a dead end. State 0 is the start.
struct ByteDfa {
  static constexpr uint8_t kNone = 0xFF;  // cls[byte]: no transition on this byte anywhere
  uint8_t cls[256];                       // byte -> class
  int32_t n_classes = 0;
  std::vector<int32_t> next;    // [state * n_classes + class]: the next state, -1 = rejected
  std::vector<uint8_t> accept;  // [state]: the text may end here
  // [state]: every string-body byte run made of whole characters other than '"', '\\' and
  // control characters is accepted from here (token_mask.h's fast path for free strings).
  std::vector<uint8_t> free;
  int32_t size() const { return (int32_t)accept.size(); }
  int32_t step(int32_t s, uint8_t b) const {
    const uint8_t c = cls[b];
    return c == kNone ? -1 : next[(size_t)s * (size_t)n_classes + c];
  }
};

struct Property {
  std::string name;
  int32_t value = -1;  // node
  bool required = false;
};

struct Node {
  NodeKind kind = NodeKind::literal;
  std::vector<TrieNode> trie;      // literal texts; object keys (each `"name"` as JSON)
  int32_t min_len = 0;             // string: characters (an escape counts as one)
  int32_t max_len = -1;            // string: -1 = unbounded
  bool integer = false;            // number
  int32_t dfa = -1;                // number (bounded), string (pattern): Grammar::dfas
  std::vector<Property> props;     // object, in schema order (at most 64)
  int32_t additional = -1;         // object: node of extra properties' values; -1 = closed
  int32_t key_string = -1;         // object with extra properties: the string node of their keys
  std::vector<uint8_t> may_close;  // object [n props + 1]: no required property from i on
  std::vector<int32_t> last_key;   // object [n props]: from i, keys i..last_key[i] may come
  int32_t items = -1;              // array: node of its items
  int64_t min_items = 0;           // array, repeat
  int64_t max_items = -1;          // array, repeat: -1 = unbounded
  std::vector<int32_t> children;   // choice alternatives; seq items; repeat's one child
  int32_t max_ws = 0;              // ws
  bool nullable = false;           // matches the empty string (ws, seq of ws, repeat min 0)
  int32_t target = -1;             // alias
};

struct Grammar {
  std::vector<Node> nodes;
  std::vector<ByteDfa> dfas;
  int32_t root = -1;
  // Bytes of white space allowed between JSON tokens (each gap on its own): natural JSON
  // fits, and a model cannot pad forever.
  int32_t max_ws = 16;
};

}  // namespace infercept::grammar
