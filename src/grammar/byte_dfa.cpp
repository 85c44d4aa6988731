#include "grammar/byte_dfa.h"

#include <map>
#include <string>
#include <vector>

namespace infercept::grammar {

namespace {

int32_t at(const ByteDfa& d, int32_t s, int32_t c) {
  return d.next[(size_t)s * (size_t)d.n_classes + (size_t)c];
}

// The class of each kind of byte: whether it begins a character, per class.
std::vector<uint8_t> class_starts_char(const ByteDfa& d) {
  std::vector<uint8_t> starts((size_t)d.n_classes, 1);
  for (int b = 0; b < 256; ++b)
    if (d.cls[b] != ByteDfa::kNone) starts[d.cls[b]] = starts_char((uint8_t)b);
  return starts;
}

// Copies `keep` states (old ids in new order) of d into a fresh automaton.
ByteDfa renumber(const ByteDfa& d, const std::vector<int32_t>& order,
                 const std::vector<int32_t>& id) {
  ByteDfa out;
  std::copy(std::begin(d.cls), std::end(d.cls), std::begin(out.cls));
  out.n_classes = d.n_classes;
  out.next.assign(order.size() * (size_t)d.n_classes, -1);
  out.accept.assign(order.size(), 0);
  for (size_t k = 0; k < order.size(); ++k) {
    const int32_t s = order[k];
    out.accept[k] = d.accept[(size_t)s];
    for (int32_t c = 0; c < d.n_classes; ++c) {
      const int32_t t = at(d, s, c);
      out.next[k * (size_t)d.n_classes + (size_t)c] = t >= 0 ? id[(size_t)t] : -1;
    }
  }
  return out;
}

}  // namespace

bool trim_dfa(ByteDfa& d) {
  const int32_t n = d.size();
  if (n == 0) return false;
  // Live: an accepting state can be reached (backwards from the accepting states).
  std::vector<std::vector<int32_t>> from((size_t)n);
  for (int32_t s = 0; s < n; ++s)
    for (int32_t c = 0; c < d.n_classes; ++c)
      if (const int32_t t = at(d, s, c); t >= 0) from[(size_t)t].push_back(s);
  std::vector<uint8_t> live((size_t)n, 0);
  std::vector<int32_t> todo;
  for (int32_t s = 0; s < n; ++s)
    if (d.accept[(size_t)s]) {
      live[(size_t)s] = 1;
      todo.push_back(s);
    }
  while (!todo.empty()) {
    const int32_t t = todo.back();
    todo.pop_back();
    for (int32_t s : from[(size_t)t])
      if (!live[(size_t)s]) {
        live[(size_t)s] = 1;
        todo.push_back(s);
      }
  }
  if (!live[0]) return false;
  // Reachable live states from the start, in breadth-first order (the start first).
  std::vector<int32_t> id((size_t)n, -1), order{0};
  id[0] = 0;
  for (size_t k = 0; k < order.size(); ++k)
    for (int32_t c = 0; c < d.n_classes; ++c) {
      const int32_t t = at(d, order[k], c);
      if (t >= 0 && live[(size_t)t] && id[(size_t)t] < 0) {
        id[(size_t)t] = (int32_t)order.size();
        order.push_back(t);
      }
    }
  d = renumber(d, order, id);
  return true;
}

void minimize_dfa(ByteDfa& d) {
  const int32_t n = d.size();
  if (n == 0) return;
  std::vector<int32_t> block((size_t)n);
  for (int32_t s = 0; s < n; ++s) block[(size_t)s] = d.accept[(size_t)s];
  int32_t blocks = -1;
  for (;;) {
    std::map<std::vector<int32_t>, int32_t> ids;
    std::vector<int32_t> next_block((size_t)n);
    std::vector<int32_t> sig((size_t)d.n_classes + 1);
    for (int32_t s = 0; s < n; ++s) {
      sig[0] = block[(size_t)s];
      for (int32_t c = 0; c < d.n_classes; ++c) {
        const int32_t t = at(d, s, c);
        sig[(size_t)c + 1] = t >= 0 ? block[(size_t)t] : -1;
      }
      next_block[(size_t)s] = ids.emplace(sig, (int32_t)ids.size()).first->second;
    }
    block.swap(next_block);
    if ((int32_t)ids.size() == blocks) break;
    blocks = (int32_t)ids.size();
  }
  // One representative per block, numbered in order of first appearance (the start's is 0).
  std::vector<int32_t> id((size_t)blocks, -1), order;
  for (int32_t s = 0; s < n; ++s)
    if (id[(size_t)block[(size_t)s]] < 0) {
      id[(size_t)block[(size_t)s]] = (int32_t)order.size();
      order.push_back(s);
    }
  std::vector<int32_t> state_id((size_t)n);
  for (int32_t s = 0; s < n; ++s) state_id[(size_t)s] = id[(size_t)block[(size_t)s]];
  d = renumber(d, order, state_id);
}

Result<ByteDfa> limit_length(const ByteDfa& d, int32_t min_chars, int32_t max_chars,
                             int32_t max_states) {
  const std::vector<uint8_t> starts = class_starts_char(d);
  // Counts of characters beyond what the bounds tell apart are one count: up to max_chars,
  // or without one up to min_chars ("at least min_chars").
  const int32_t cap = max_chars >= 0 ? max_chars : min_chars;
  std::map<std::pair<int32_t, int32_t>, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> order{{0, 0}};
  ids[{0, 0}] = 0;
  ByteDfa out;
  std::copy(std::begin(d.cls), std::end(d.cls), std::begin(out.cls));
  out.n_classes = d.n_classes;
  for (size_t k = 0; k < order.size(); ++k) {
    const auto [s, count] = order[k];
    out.accept.push_back(d.accept[(size_t)s] && count >= min_chars);
    for (int32_t c = 0; c < d.n_classes; ++c) {
      const int32_t t = at(d, s, c);
      int32_t next_count = count + (starts[(size_t)c] ? 1 : 0);
      if (next_count > cap) next_count = max_chars >= 0 ? -1 : cap;  // -1: too long
      if (t < 0 || next_count < 0) {
        out.next.push_back(-1);
        continue;
      }
      const auto [it, added] = ids.emplace(std::make_pair(t, next_count), (int32_t)order.size());
      if (added) {
        if ((int32_t)order.size() >= max_states)
          return make_error("more than ", std::to_string(max_states), " automaton states");
        order.emplace_back(t, next_count);
      }
      out.next.push_back(it->second);
    }
  }
  if (!trim_dfa(out)) return make_error("no string satisfies it");
  minimize_dfa(out);
  return out;
}

void mark_free(ByteDfa& d) {
  const int32_t n = d.size();
  std::vector<uint8_t> fr((size_t)n, 1), one((size_t)n), two((size_t)n);
  auto step = [&](int32_t s, int b) { return s < 0 ? -1 : d.step(s, (uint8_t)b); };
  // Every byte in [lo, hi] from s leads to a state where `ok` holds.
  auto all = [&](int32_t s, int lo, int hi, const std::vector<uint8_t>& ok) {
    for (int b = lo; b <= hi; ++b) {
      const int32_t t = step(s, b);
      if (t < 0 || !ok[(size_t)t]) return false;
    }
    return true;
  };
  for (bool changed = true; changed;) {
    changed = false;
    // one[s]: any continuation byte leads to a free state; two[s]: to a state where one holds.
    for (int32_t s = 0; s < n; ++s) one[(size_t)s] = all(s, 0x80, 0xBF, fr);
    for (int32_t s = 0; s < n; ++s) two[(size_t)s] = all(s, 0x80, 0xBF, one);
    for (int32_t s = 0; s < n; ++s) {
      if (!fr[(size_t)s]) continue;
      bool ok = all(s, 0x20, 0x21, fr) && all(s, 0x23, 0x5B, fr) && all(s, 0x5D, 0x7F, fr);
      // Multi-byte characters: the lead byte, then its continuation bytes (UTF-8's ranges
      // after E0, ED, F0 and F4 exclude overlong forms, surrogates and what lies past
      // U+10FFFF).
      for (int lead = 0xC2; ok && lead <= 0xF4; ++lead) {
        const int32_t t = step(s, lead);
        if (t < 0) {
          ok = false;
          break;
        }
        const int lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
        const int hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
        const std::vector<uint8_t>& then = lead < 0xE0 ? fr : lead < 0xF0 ? one : two;
        ok = all(t, lo, hi, then);
      }
      if (!ok) {
        fr[(size_t)s] = 0;
        changed = true;
      }
    }
  }
  d.free = std::move(fr);
}

}  // namespace infercept::grammar
