// Which tokens a grammar allows next: a bit per token id, computed from a Matcher's state
// by walking a byte trie of the vocabulary (docs/DESIGN.md, "Constrained decoding").
//
// The walk feeds each trie edge's byte to the matcher and skips a whole subtree as soon as
// its prefix is rejected, so a state that allows few bytes (between JSON tokens, inside a
// key or an enum) visits few nodes. The common expensive state, the body of a free string,
// where nearly every token is allowed, is precomputed: tokens made only of bytes a string
// body takes as they are ("plain": not '"', '\\', nor control bytes; whole UTF-8 characters) leave
// that state unchanged whatever surrounds it, so their bits come from one precomputed mask and only
// a second, much smaller trie of the other tokens is walked. Masks are also cached per state
// (MaskCache): a string's body, a gap between properties, ... recur within a generation and
// across requests of the same grammar.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"

namespace infercept::grammar {

// The vocabulary as the walk needs it, built once per tokenizer.
class Vocabulary {
 public:
  // bytes[id]: what token id writes ("" for a token a grammar never allows: control tokens).
  // end_ids: tokens allowed where the text is complete (end of turn, EOS).
  Vocabulary(std::vector<std::string> bytes, std::vector<int32_t> end_ids);

  int32_t size() const { return (int32_t)bytes_.size(); }
  size_t mask_words() const { return (bytes_.size() + 63) / 64; }
  const std::string& bytes(int32_t id) const { return bytes_[(size_t)id]; }
  const std::vector<int32_t>& end_ids() const { return end_ids_; }

  // A byte trie in preorder: node i has `byte`, its subtree ends before `skip`, the tokens
  // that end at it are ids[tok_begin[i] .. tok_begin[i + 1]).
  struct Trie {
    std::vector<uint8_t> byte;
    std::vector<int32_t> skip;
    std::vector<int32_t> tok_begin;
    std::vector<int32_t> ids;
    size_t size() const { return byte.size(); }
  };
  const Trie& all() const { return all_; }
  const Trie& not_plain() const { return not_plain_; }
  const std::vector<uint64_t>& plain_mask() const { return plain_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> end_ids_;
  Trie all_, not_plain_;
  std::vector<uint64_t> plain_;
};

// Masks by matcher state (Matcher::state_key), shared by the requests of one grammar;
// thread-safe. Emptied when full.
class MaskCache {
 public:
  explicit MaskCache(size_t max_entries = 512) : max_entries_(max_entries) {}
  bool get(const std::string& key, uint64_t* mask, size_t words);
  void put(const std::string& key, const uint64_t* mask, size_t words);
  size_t size();

 private:
  std::mutex mu_;
  size_t max_entries_;
  std::unordered_map<std::string, std::vector<uint64_t>> masks_;
};

struct MaskStats {
  int64_t nodes_visited = 0;
  bool cached = false;
};

// Fills mask[0 .. v.mask_words()) for the matcher's state: bit id set = token id may come
// next (its bytes are accepted; an end token where the text is complete). The matcher's
// state is unchanged (its arena is used as scratch). `cache` may be null.
void compute_mask(Matcher& m, const Vocabulary& v, MaskCache* cache, uint64_t* mask,
                  MaskStats* stats = nullptr);

// logits[id] = -inf where the mask's bit is clear.
void apply_mask(std::span<float> logits, const uint64_t* mask);

}  // namespace infercept::grammar
