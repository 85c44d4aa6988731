#include "grammar/token_mask.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/check.h"

namespace infercept::grammar {

namespace {

// A token a string body reads as it is, leaving the body's state unchanged: no '"', '\\' or
// control byte, and whole UTF-8 characters only.
bool plain_token(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = (uint8_t)s[i];
    if (c < 0x80) {
      if (c < 0x20 || c == '"' || c == '\\') return false;
      ++i;
      continue;
    }
    if (c < 0xC2 || c > 0xF4) return false;
    const size_t need = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
    if (i + need >= s.size()) return false;  // the character continues in the next token
    const uint8_t c1 = (uint8_t)s[i + 1];
    const uint8_t lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    const uint8_t hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (c1 < lo || c1 > hi) return false;
    for (size_t k = 2; k <= need; ++k)
      if (((uint8_t)s[i + k] & 0xC0) != 0x80) return false;
    i += need + 1;
  }
  return true;
}

// The preorder trie of the given ids (sorted by their bytes; empty ones left out).
Vocabulary::Trie build_trie(const std::vector<std::string>& bytes, std::vector<int32_t> ids) {
  std::erase_if(ids, [&](int32_t id) { return bytes[(size_t)id].empty(); });
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes[(size_t)a] != bytes[(size_t)b] ? bytes[(size_t)a] < bytes[(size_t)b] : a < b;
  });
  Vocabulary::Trie t;
  std::vector<std::pair<int32_t, int32_t>> ends;  // (node, id)
  std::vector<int32_t> path;                      // open nodes, one per byte of `prev`
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& s = bytes[(size_t)id];
    size_t common = 0;
    if (prev != nullptr)
      while (common < s.size() && common < prev->size() && s[common] == (*prev)[common]) ++common;
    while (path.size() > common) {
      t.skip[(size_t)path.back()] = (int32_t)t.byte.size();
      path.pop_back();
    }
    for (size_t k = common; k < s.size(); ++k) {
      path.push_back((int32_t)t.byte.size());
      t.byte.push_back((uint8_t)s[k]);
      t.skip.push_back(-1);
    }
    ends.emplace_back(path.back(), id);
    prev = &s;
  }
  while (!path.empty()) {
    t.skip[(size_t)path.back()] = (int32_t)t.byte.size();
    path.pop_back();
  }
  t.tok_begin.assign(t.byte.size() + 1, 0);
  for (const auto& [node, id] : ends) t.tok_begin[(size_t)node + 1]++;
  std::partial_sum(t.tok_begin.begin(), t.tok_begin.end(), t.tok_begin.begin());
  t.ids.resize(ends.size());
  std::vector<int32_t> fill(t.tok_begin.begin(), t.tok_begin.end() - 1);
  for (const auto& [node, id] : ends) t.ids[(size_t)fill[(size_t)node]++] = id;
  return t;
}

void set_bit(uint64_t* mask, int32_t id) {
  mask[id >> 6] |= uint64_t{1} << (id & 63);
}

// Walks `t` from the matcher's heads, setting the bits of every token whose bytes are all
// accepted.
void walk(Matcher& m, const Vocabulary::Trie& t, uint64_t* mask, int64_t& visited) {
  struct Level {
    int32_t end;         // the subtree of this level ends before this trie index
    size_t arena_mark;   // the matcher's arena before this level's frames
    size_t begin, size;  // this level's heads in `heads`
  };
  const size_t base = m.arena_size();
  std::vector<int32_t> heads(m.heads().begin(), m.heads().end());
  std::vector<Level> levels{{(int32_t)t.size(), base, 0, heads.size()}};
  std::vector<int32_t> next;
  const int32_t n = (int32_t)t.size();
  for (int32_t i = 0; i < n;) {
    while (i >= levels.back().end) {
      const Level& l = levels.back();
      m.truncate(l.arena_mark);
      heads.resize(l.begin);
      levels.pop_back();
    }
    const Level& cur = levels.back();
    const size_t mark = m.arena_size();
    next.clear();
    m.feed(std::span<const int32_t>(heads.data() + cur.begin, cur.size), t.byte[(size_t)i], next);
    ++visited;
    if (next.empty()) {
      m.truncate(mark);
      i = t.skip[(size_t)i];
      continue;
    }
    for (int32_t k = t.tok_begin[(size_t)i]; k < t.tok_begin[(size_t)i + 1]; ++k)
      set_bit(mask, t.ids[(size_t)k]);
    if (i + 1 < t.skip[(size_t)i]) {
      const size_t begin = heads.size();
      heads.insert(heads.end(), next.begin(), next.end());
      levels.push_back({t.skip[(size_t)i], mark, begin, next.size()});
    } else {
      m.truncate(mark);
    }
    ++i;
  }
  m.truncate(base);
}

// The plain tokens (Vocabulary::plain_mask) a pattern's automaton takes from state q: a walk
// of the whole trie with the automaton alone (no matcher frames), cut at the first byte it
// refuses or that is not plain.
void walk_plain_dfa(const ByteDfa& d, int32_t q, const Vocabulary& v, uint64_t* mask,
                    int64_t& visited) {
  const Vocabulary::Trie& t = v.all();
  const uint64_t* plain = v.plain_mask().data();
  struct Level {
    int32_t end, state;
  };
  const int32_t n = (int32_t)t.size();
  std::vector<Level> levels{{n, q}};
  for (int32_t i = 0; i < n;) {
    while (i >= levels.back().end) levels.pop_back();
    const uint8_t b = t.byte[(size_t)i];
    const int32_t s = b >= 0x20 && b != '"' && b != '\\' ? d.step(levels.back().state, b) : -1;
    ++visited;
    if (s < 0) {
      i = t.skip[(size_t)i];
      continue;
    }
    for (int32_t k = t.tok_begin[(size_t)i]; k < t.tok_begin[(size_t)i + 1]; ++k) {
      const int32_t id = t.ids[(size_t)k];
      if ((plain[id >> 6] >> (id & 63)) & 1) set_bit(mask, id);
    }
    if (i + 1 < t.skip[(size_t)i]) levels.push_back({t.skip[(size_t)i], s});
    ++i;
  }
}

}  // namespace

Vocabulary::Vocabulary(std::vector<std::string> bytes, std::vector<int32_t> end_ids)
    : bytes_(std::move(bytes)), end_ids_(std::move(end_ids)) {
  for (int32_t id : end_ids_) {
    CHECK(id >= 0 && id < size());
    bytes_[(size_t)id].clear();  // an end token is allowed by the end rule alone
  }
  std::vector<int32_t> every((size_t)size()), others;
  std::iota(every.begin(), every.end(), 0);
  plain_.assign(mask_words(), 0);
  for (int32_t id : every) {
    const std::string& s = bytes_[(size_t)id];
    if (s.empty()) continue;
    if (plain_token(s))
      set_bit(plain_.data(), id);
    else
      others.push_back(id);
  }
  all_ = build_trie(bytes_, every);
  not_plain_ = build_trie(bytes_, others);
}

bool MaskCache::get(const std::string& key, uint64_t* mask, size_t words) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = masks_.find(key);
  if (it == masks_.end()) return false;
  CHECK_EQ(it->second.size(), words);
  std::memcpy(mask, it->second.data(), words * sizeof(uint64_t));
  return true;
}

void MaskCache::put(const std::string& key, const uint64_t* mask, size_t words) {
  std::lock_guard<std::mutex> lock(mu_);
  if (masks_.size() >= max_entries_) masks_.clear();
  masks_[key].assign(mask, mask + words);
}

size_t MaskCache::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return masks_.size();
}

void compute_mask(Matcher& m, const Vocabulary& v, MaskCache* cache, uint64_t* mask,
                  MaskStats* stats) {
  const size_t words = v.mask_words();
  std::string key;
  if (cache != nullptr) {
    m.state_key(key);
    if (cache->get(key, mask, words)) {
      if (stats != nullptr) stats->cached = true;
      return;
    }
  }
  int64_t visited = 0;
  int32_t q = -1;
  const ByteDfa* pattern = nullptr;
  if (m.in_free_string(m.heads())) {
    std::memcpy(mask, v.plain_mask().data(), words * sizeof(uint64_t));
    walk(m, v.not_plain(), mask, visited);
  } else if ((pattern = m.pattern_body(m.heads(), &q)) != nullptr) {
    // The plain tokens' bits depend on the automaton's state alone: cached under it (shared
    // by every place of the grammar that pattern's string is at), the rest walked as usual.
    // (The key cannot be a state key: those are whole frames, 24 bytes and more.)
    std::string plain_key(9, '\0');
    const int32_t id = (int32_t)(pattern - m.grammar().dfas.data());
    plain_key[0] = 'P';
    std::memcpy(plain_key.data() + 1, &id, 4);
    std::memcpy(plain_key.data() + 5, &q, 4);
    if (cache == nullptr || !cache->get(plain_key, mask, words)) {
      std::memset(mask, 0, words * sizeof(uint64_t));
      walk_plain_dfa(*pattern, q, v, mask, visited);
      if (cache != nullptr) cache->put(plain_key, mask, words);
    }
    walk(m, v.not_plain(), mask, visited);
  } else {
    std::memset(mask, 0, words * sizeof(uint64_t));
    walk(m, v.all(), mask, visited);
  }
  if (m.accepting())
    for (int32_t id : v.end_ids()) set_bit(mask, id);
  if (stats != nullptr) stats->nodes_visited = visited;
  if (cache != nullptr) cache->put(key, mask, words);
}

void apply_mask(std::span<float> logits, const uint64_t* mask) {
  // Eight logits per mask byte: each gets 0 or -inf added from a table of the byte's 256
  // values (vectorizes; a branch per bit would not, and a string body's mask has its clear
  // bits scattered over most words). Words with every bit set are skipped.
  static const auto table = [] {
    std::array<std::array<float, 8>, 256> t{};
    for (int b = 0; b < 256; ++b)
      for (int k = 0; k < 8; ++k)
        t[(size_t)b][(size_t)k] = ((b >> k) & 1) ? 0.0f : -std::numeric_limits<float>::infinity();
    return t;
  }();
  const size_t n = logits.size();
  float* x = logits.data();
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(mask);  // little-endian words
  for (size_t w = 0; w * 64 < n; ++w) {
    if (mask[w] == ~uint64_t{0}) continue;
    const size_t end = std::min<size_t>(w * 64 + 64, n);
    size_t i = w * 64;
    for (; i + 8 <= end; i += 8) {
      const float* add = table[bytes[i / 8]].data();
      for (size_t k = 0; k < 8; ++k) x[i + k] += add[k];
    }
    for (; i < end; ++i)
      if (!((mask[w] >> (i & 63)) & 1)) x[i] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace infercept::grammar
