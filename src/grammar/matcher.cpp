#include "grammar/matcher.h"

#include <algorithm>

#include "core/check.h"

namespace infercept::grammar {

// Frame states per node kind:
//   literal  st = trie node
//   string   st 0 before '"', 1 body, 2 after '\', 3..6 inside \uXXXX, 16.. inside a UTF-8
//            character (only valid UTF-8 is read); a = length in characters (bounded only)
//   number   st 0 start, 1 after '-', 2 after a leading 0, 3 integer digits, 4 after '.',
//            5 fraction digits, 6 after e/E, 7 after the exponent's sign, 8 exponent digits;
//            with bounds (Node::dfa), st = the state of its automaton (number_range.h)
//   string   with a pattern (Node::dfa): b = the automaton's state after the decoded value so
//            far (regex.h); it reads each raw byte and each escape's decoded byte
//   object   st 0 before '{', 1 after '{', 2 after a value, 3 after ',', 4 after a key,
//            5 after ':', 6 inside a declared key; b = next declared property (low 32 bits)
//            | the key's trie node (st 6) or property, -1 for an extra one (st 4, 5) << 32
//   array    st 0 before '[', 1 after '[', 2 after an item, 3 after ','; b = items so far
//   seq      st = the next item
//   repeat   st 0 before the first, 1 after one; b = count
//   ws       a = bytes so far
// Gaps (object 1-5, array 1-3) take up to Grammar::max_ws white-space bytes, counted in a.
// A frame whose construct has just been completed is popped at once (settle), so a frame on
// a stack always has something left to read or may end.

namespace {
bool is_ws(uint8_t c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}
bool is_digit(uint8_t c) {
  return c >= '0' && c <= '9';
}
bool is_hex(uint8_t c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
// String states from here on: inside a UTF-8 character, kUtf8 + 8 * (bytes still needed)
// + the allowed range of the next one.
constexpr int32_t kUtf8 = 16;
uint64_t key_range(const Node& n, int32_t i) {
  const int32_t np = (int32_t)n.props.size();
  if (i >= np) return 0;
  const int32_t last = n.last_key[(size_t)i];
  const uint64_t upto = last >= 63 ? ~uint64_t{0} : (uint64_t{1} << (last + 1)) - 1;
  return upto & ~((uint64_t{1} << i) - 1);
}
int32_t low(uint64_t b) {
  return (int32_t)(uint32_t)b;
}
int32_t high(uint64_t b) {
  return (int32_t)(uint32_t)(b >> 32);
}
// The byte an escape's letter stands for (\u aside: -1).
int decoded_escape(uint8_t c) {
  switch (c) {
    case '"':
    case '\\':
    case '/':
      return c;
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    default:
      return -1;
  }
}
uint64_t pack(int32_t lo, int32_t hi) {
  return (uint64_t)(uint32_t)lo | ((uint64_t)(uint32_t)hi << 32);
}
}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  CHECK(g_ != nullptr && g_->root >= 0);
  const Node& r = g_->nodes[(size_t)g_->root];
  auto start = [&](int32_t node) { heads_.push_back(push({-1, node, 0, 0, 0})); };
  if (r.kind == NodeKind::choice) {
    for (int32_t alt : r.children) start(alt);
  } else {
    start(g_->root);
  }
}

int32_t Matcher::push(const Frame& f) {
  arena_.push_back(f);
  return (int32_t)arena_.size() - 1;
}

// Pops frames that are complete and cannot read more.
int32_t Matcher::settle(int32_t h) const {
  while (h >= 0) {
    const Frame& f = arena_[(size_t)h];
    const Node& n = g_->nodes[(size_t)f.node];
    const bool must_end = (n.kind == NodeKind::seq && f.st == (int32_t)n.children.size()) ||
                          (n.kind == NodeKind::repeat && f.st == 1 && n.max_items >= 0 &&
                           (int64_t)f.b >= n.max_items);
    if (!must_end) break;
    h = f.parent;
  }
  return h;
}

void Matcher::enter(int32_t parent, int32_t node, uint8_t c, std::vector<int32_t>& out) {
  const Node& n = g_->nodes[(size_t)node];
  if (n.kind == NodeKind::choice) {
    for (int32_t alt : n.children) enter(parent, alt, c, out);
    return;
  }
  feed_one(push({parent, node, 0, 0, 0}), c, out);
}

void Matcher::feed(std::span<const int32_t> heads, uint8_t c, std::vector<int32_t>& out) {
  for (int32_t h : heads) feed_one(h, c, out);
}

void Matcher::feed_one(int32_t head, uint8_t c, std::vector<int32_t>& out) {
  if (head < 0) return;  // complete: nothing may follow
  const Frame f = arena_[(size_t)head];
  const Node& n = g_->nodes[(size_t)f.node];
  const int32_t max_ws = g_->max_ws;
  Frame nf = f;
  auto then = [&](int32_t st) {
    nf.st = st;
    out.push_back(push(nf));
  };
  auto end_here = [&] { out.push_back(settle(f.parent)); };  // c was the construct's last
  auto pass_on = [&] { feed_one(f.parent, c, out); };        // complete; c belongs to the parent
  auto gap = [&]() -> bool {                                 // white space in a gap
    if (!is_ws(c)) return false;
    if (f.a < max_ws) {
      nf.a = f.a + 1;
      out.push_back(push(nf));
    }
    return true;
  };
  switch (n.kind) {
    case NodeKind::literal: {
      const int32_t k = n.trie[(size_t)f.st].child(c);
      if (k >= 0) {
        if (n.trie[(size_t)k].kids.empty()) return end_here();
        return then(k);
      }
      if (n.trie[(size_t)f.st].leaf >= 0) pass_on();
      return;
    }
    case NodeKind::string: {
      const bool bounded = n.max_len >= 0 || n.min_len > 0;
      // A pattern's automaton reads the decoded byte `d`: false when it refuses it.
      const ByteDfa* dfa = n.dfa >= 0 ? &g_->dfas[(size_t)n.dfa] : nullptr;
      auto pattern_reads = [&](uint8_t d) {
        if (dfa == nullptr) return true;
        const int32_t t = dfa->step((int32_t)f.b, d);
        if (t < 0) return false;
        nf.b = (uint64_t)t;
        return true;
      };
      if (f.st >= kUtf8) {  // inside a multi-byte character: a continuation byte
        const int32_t need = (f.st - kUtf8) / 8, range = (f.st - kUtf8) % 8;
        static constexpr uint8_t lo[] = {0x80, 0xA0, 0x80, 0x90, 0x80};
        static constexpr uint8_t hi[] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
        if (c < lo[range] || c > hi[range] || !pattern_reads(c)) return;
        return then(need == 1 ? 1 : kUtf8 + (need - 1) * 8);
      }
      switch (f.st) {
        case 0:
          if (c == '"') then(1);
          return;
        case 1: {
          if (c == '"') {
            if (f.a >= n.min_len && (dfa == nullptr || dfa->accept[(size_t)f.b])) end_here();
            return;
          }
          if (c < 0x20) return;
          const bool starts = c < 0x80 || (c >= 0xC2 && c <= 0xF4);
          if (!starts) return;  // not valid UTF-8 here
          if (bounded) {
            if (n.max_len >= 0 && f.a >= n.max_len) return;
            nf.a = f.a + 1;
          }
          if (c == '\\') {
            if (dfa != nullptr) {  // only if some escape's byte may come
              bool any = false;
              for (uint8_t e : {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'})
                any = any || dfa->step((int32_t)f.b, (uint8_t)decoded_escape(e)) >= 0;
              if (!any) return;
            }
            return then(2);
          }
          if (!pattern_reads(c)) return;
          if (c >= 0x80) {
            // (need, range of the next byte): UTF-8's rules for overlong forms and surrogates
            const int32_t need = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
            const int32_t range = c == 0xE0 ? 1 : c == 0xED ? 2 : c == 0xF0 ? 3 : c == 0xF4 ? 4 : 0;
            return then(kUtf8 + need * 8 + range);
          }
          if (!bounded && nf.b == f.b) {
            out.push_back(head);  // the same state: no new frame
            return;
          }
          return then(1);
        }
        case 2:
          // With a pattern, \u is not written (its decoded character is reached raw).
          if (c == 'u' && dfa == nullptr) return then(3);
          if (decoded_escape(c) >= 0 && pattern_reads((uint8_t)decoded_escape(c))) then(1);
          return;
        default:  // 3..6: hex digits of \u
          if (is_hex(c)) then(f.st == 6 ? 1 : f.st + 1);
          return;
      }
    }
    case NodeKind::number: {
      if (n.dfa >= 0) {  // bounded: the automaton's state in st
        const ByteDfa& d = g_->dfas[(size_t)n.dfa];
        const int32_t t = d.step(f.st, c);
        if (t >= 0) return then(t);
        // The number ends; a byte that could only continue a number is refused outright.
        const bool numeric =
            is_digit(c) || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E';
        if (d.accept[(size_t)f.st] && !numeric) pass_on();
        return;
      }
      const bool frac = !n.integer;
      switch (f.st) {
        case 0:
          if (c == '-') return then(1);
          [[fallthrough]];
        case 1:
          if (c == '0') return then(2);
          if (is_digit(c)) then(3);
          return;
        case 2:
        case 3:
        case 5:
          if (is_digit(c) && f.st != 2) {
            out.push_back(head);
            return;
          }
          if (c == '.' && frac && f.st != 5) return then(4);
          if ((c == 'e' || c == 'E') && frac) return then(6);
          return pass_on();
        case 4:
          if (is_digit(c)) then(5);
          return;
        case 6:
          if (c == '+' || c == '-') return then(7);
          [[fallthrough]];
        case 7:
          if (is_digit(c)) then(8);
          return;
        default:  // 8
          if (is_digit(c)) {
            out.push_back(head);
            return;
          }
          return pass_on();
      }
    }
    case NodeKind::object: {
      const int32_t np = (int32_t)n.props.size();
      const int32_t i = low(f.b);
      auto key_start = [&] {  // c == '"'
        const uint64_t r = key_range(n, i);
        if (r != 0) {
          const int32_t k = n.trie[0].child('"');
          if (k >= 0 && (n.trie[(size_t)k].below & r) != 0) {
            nf.a = 0;
            nf.b = pack(i, k);
            then(6);
          }
        }
        if (n.additional >= 0) {
          Frame obj = f;
          obj.st = 4;
          obj.a = 0;
          obj.b = pack(i, -1);
          enter(push(obj), n.key_string, c, out);
        }
      };
      switch (f.st) {
        case 0:
          if (c == '{') then(1);
          return;
        case 1:
        case 2:
        case 3:
          if (gap()) return;
          if (c == '}' && f.st != 3) {
            if (n.may_close[(size_t)std::min(i, np)]) end_here();
            return;
          }
          if (c == '"' && f.st != 2) return key_start();
          if (c == ',' && f.st == 2) {
            const bool more = (key_range(n, i) & n.trie[0].below) != 0 || n.additional >= 0;
            if (more) {
              nf.a = 0;
              then(3);
            }
          }
          return;
        case 4:
          if (gap()) return;
          if (c == ':') {
            nf.a = 0;
            then(5);
          }
          return;
        case 5: {
          if (gap()) return;
          const int32_t j = high(f.b);
          Frame obj = f;
          obj.st = 2;
          obj.a = 0;
          obj.b = pack(j >= 0 ? j + 1 : i, 0);
          enter(push(obj), j >= 0 ? n.props[(size_t)j].value : n.additional, c, out);
          return;
        }
        default: {  // 6: inside a declared key
          const int32_t k = n.trie[(size_t)high(f.b)].child(c);
          if (k < 0 || (n.trie[(size_t)k].below & key_range(n, i)) == 0) return;
          if (n.trie[(size_t)k].leaf >= 0) {  // the closing quote: keys are JSON strings
            nf.b = pack(i, n.trie[(size_t)k].leaf);
            return then(4);
          }
          nf.b = pack(i, k);
          return then(6);
        }
      }
    }
    case NodeKind::array: {
      const int64_t count = (int64_t)f.b;
      switch (f.st) {
        case 0:
          if (c == '[') then(1);
          return;
        case 1:
        case 2:
        case 3:
          if (gap()) return;
          if (c == ']' && f.st != 3) {
            if (count >= n.min_items) end_here();
            return;
          }
          if (c == ',' && f.st == 2) {
            if (n.max_items < 0 || count < n.max_items) {
              nf.a = 0;
              then(3);
            }
            return;
          }
          if (f.st != 2 && (n.max_items < 0 || count < n.max_items)) {
            Frame arr = f;
            arr.st = 2;
            arr.a = 0;
            arr.b = (uint64_t)(count + 1);
            enter(push(arr), n.items, c, out);
          }
          return;
      }
      return;
    }
    case NodeKind::seq: {
      if (f.st == (int32_t)n.children.size()) return pass_on();
      Frame s = f;
      s.st = f.st + 1;
      enter(push(s), n.children[(size_t)f.st], c, out);
      return;
    }
    case NodeKind::repeat: {
      const int64_t count = f.st == 0 ? 0 : (int64_t)f.b;
      if (n.max_items < 0 || count < n.max_items) {
        Frame r = f;
        r.st = 1;
        r.b = (uint64_t)(count + 1);
        enter(push(r), n.children[0], c, out);
      }
      if (f.st == 1 && count >= n.min_items) pass_on();
      return;
    }
    case NodeKind::ws:
      if (is_ws(c) && f.a < n.max_ws) {
        nf.a = f.a + 1;
        out.push_back(push(nf));
        return;
      }
      return pass_on();
    case NodeKind::choice:
    case NodeKind::alias:
      CHECK_MSG(false, "choice/alias frames are never pushed");
  }
}

bool Matcher::head_accepting(int32_t h) const {
  for (; h >= 0; h = arena_[(size_t)h].parent) {
    const Frame& f = arena_[(size_t)h];
    const Node& n = g_->nodes[(size_t)f.node];
    switch (n.kind) {
      case NodeKind::literal:
        if (n.trie[(size_t)f.st].leaf < 0) return false;
        break;
      case NodeKind::number:
        if (n.dfa >= 0) {
          if (!g_->dfas[(size_t)n.dfa].accept[(size_t)f.st]) return false;
        } else if (f.st != 2 && f.st != 3 && f.st != 5 && f.st != 8) {
          return false;
        }
        break;
      case NodeKind::ws:
        break;
      case NodeKind::seq:
        for (size_t k = (size_t)f.st; k < n.children.size(); ++k)
          if (!g_->nodes[(size_t)n.children[k]].nullable) return false;
        break;
      case NodeKind::repeat:
        if ((f.st == 0 ? 0 : (int64_t)f.b) < n.min_items) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

bool Matcher::accepting(std::span<const int32_t> heads) const {
  for (int32_t h : heads)
    if (head_accepting(h)) return true;
  return false;
}

bool Matcher::in_free_string(std::span<const int32_t> heads) const {
  for (int32_t h : heads) {
    if (h < 0) return false;
    const Frame& f = arena_[(size_t)h];
    const Node& n = g_->nodes[(size_t)f.node];
    if (n.kind != NodeKind::string || f.st != 1 || n.max_len >= 0 || n.min_len > 0) return false;
    if (n.dfa >= 0 && !g_->dfas[(size_t)n.dfa].free[(size_t)f.b]) return false;
  }
  return !heads.empty();
}

const ByteDfa* Matcher::pattern_body(std::span<const int32_t> heads, int32_t* state) const {
  if (heads.size() != 1 || heads[0] < 0) return nullptr;
  const Frame& f = arena_[(size_t)heads[0]];
  const Node& n = g_->nodes[(size_t)f.node];
  if (n.kind != NodeKind::string || n.dfa < 0 || f.st != 1 || n.max_len >= 0 || n.min_len > 0)
    return nullptr;
  *state = (int32_t)f.b;
  return &g_->dfas[(size_t)n.dfa];
}

bool Matcher::same_stack(int32_t x, int32_t y) const {
  while (x >= 0 && y >= 0) {
    if (x == y) return true;
    const Frame& a = arena_[(size_t)x];
    const Frame& b = arena_[(size_t)y];
    if (a.node != b.node || a.st != b.st || a.a != b.a || a.b != b.b) return false;
    x = a.parent;
    y = b.parent;
  }
  return x == y;
}

bool Matcher::advance(std::string_view bytes) {
  const size_t mark = arena_.size();
  std::vector<int32_t> cur = heads_;
  for (unsigned char c : bytes) {
    next_.clear();
    feed(cur, c, next_);
    // The same reading reached twice (alternatives that met again) is followed once.
    std::vector<int32_t> uniq;
    for (int32_t h : next_) {
      bool dup = false;
      for (int32_t u : uniq) dup = dup || same_stack(h, u);
      if (!dup) uniq.push_back(h);
    }
    if (uniq.empty()) {
      arena_.resize(mark);
      return false;
    }
    cur.swap(uniq);
  }
  heads_ = std::move(cur);
  if (arena_.size() > compact_at_) compact();
  return true;
}

// Copies the frames the heads still reach into a fresh arena (a long generation leaves
// behind the frames of every step it took).
void Matcher::compact() {
  std::vector<Frame> fresh;
  std::vector<int32_t> remap(arena_.size(), -1);
  auto copy = [&](auto&& self, int32_t h) -> int32_t {
    if (h < 0) return -1;
    if (remap[(size_t)h] >= 0) return remap[(size_t)h];
    Frame f = arena_[(size_t)h];
    f.parent = self(self, f.parent);
    fresh.push_back(f);
    return remap[(size_t)h] = (int32_t)fresh.size() - 1;
  };
  for (int32_t& h : heads_) h = copy(copy, h);
  arena_.swap(fresh);
  compact_at_ = 2 * arena_.size() + 4096;
}

void Matcher::state_key(std::string& out) const {
  out.clear();
  auto put = [&](const void* p, size_t n) { out.append((const char*)p, n); };
  for (int32_t h : heads_) {
    for (int32_t x = h; x >= 0; x = arena_[(size_t)x].parent) {
      const Frame& f = arena_[(size_t)x];
      put(&f.node, 4);
      put(&f.st, 4);
      put(&f.a, 4);
      put(&f.b, 8);
    }
    const int32_t sep = -1;
    put(&sep, 4);
  }
}

}  // namespace infercept::grammar
