#include "grammar/regex.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "grammar/byte_dfa.h"

namespace infercept::grammar {

namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;

// A set of code points: sorted, disjoint, non-adjacent ranges.
using CharSet = std::vector<std::pair<uint32_t, uint32_t>>;

CharSet normalized(CharSet s) {
  std::sort(s.begin(), s.end());
  CharSet out;
  for (const auto& r : s) {
    if (!out.empty() && r.first <= out.back().second + 1)
      out.back().second = std::max(out.back().second, r.second);
    else
      out.push_back(r);
  }
  return out;
}

CharSet complement(const CharSet& s) {
  CharSet out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : s) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCp) out.push_back({next, kMaxCp});
  return out;
}

const CharSet kDigit = {{'0', '9'}};
const CharSet kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript's WhiteSpace and LineTerminator.
const CharSet kSpace = {{0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680},
                        {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                        {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
// `.`: anything but a line terminator.
const CharSet kDot = complement({{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}});

// The regex as a tree, nodes in a pool.
struct Re {
  enum Kind { set, cat, alt, repeat, bol, eol } kind = cat;
  CharSet chars;
  std::vector<int32_t> kids;
  int32_t min = 0, max = -1;  // repeat; max -1 = unbounded
};

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  Result<int32_t> parse() {
    TRY_ASSIGN(int32_t r, alternation());
    if (i_ < p_.size()) return error("unbalanced ')'");
    return r;
  }
  std::vector<Re> pool;

 private:
  Error error(const std::string& what) const {
    return make_error(what, " at offset ", std::to_string(i_));
  }
  int32_t add(Re r) {
    pool.push_back(std::move(r));
    return (int32_t)pool.size() - 1;
  }
  bool eof() const { return i_ >= p_.size(); }
  // The next code point (the pattern is UTF-8; a stray byte stands for itself as Latin-1).
  uint32_t next_cp() {
    const auto c = (uint8_t)p_[i_++];
    if (c < 0x80) return c;
    const int need = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    uint32_t cp = c & (0x3F >> need);
    for (int k = 0; k < need && i_ < p_.size(); ++k) cp = (cp << 6) | ((uint8_t)p_[i_++] & 0x3F);
    return cp;
  }

  Result<int32_t> alternation() {
    std::vector<int32_t> alts;
    for (;;) {
      TRY_ASSIGN(int32_t c, concatenation());
      alts.push_back(c);
      if (eof() || p_[i_] != '|') break;
      ++i_;
    }
    if (alts.size() == 1) return alts[0];
    Re r;
    r.kind = Re::alt;
    r.kids = std::move(alts);
    return add(std::move(r));
  }

  Result<int32_t> concatenation() {
    Re r;
    r.kind = Re::cat;
    while (!eof() && p_[i_] != '|' && p_[i_] != ')') {
      TRY_ASSIGN(int32_t a, atom());
      TRY_ASSIGN(a, quantified(a));
      r.kids.push_back(a);
    }
    return add(std::move(r));
  }

  // A number of a {n,m} quantifier; -1 when none is there.
  int64_t number() {
    int64_t n = -1;
    while (!eof() && p_[i_] >= '0' && p_[i_] <= '9') {
      n = (n < 0 ? 0 : n) * 10 + (p_[i_++] - '0');
      if (n > 1000000) n = 1000000;
    }
    return n;
  }

  Result<int32_t> quantified(int32_t a) {
    for (;;) {
      if (eof()) return a;
      int64_t lo = 0, hi = -1;
      const size_t at = i_;
      const char c = p_[i_];
      if (c == '*' || c == '+' || c == '?') {
        ++i_;
        lo = c == '+' ? 1 : 0;
        hi = c == '?' ? 1 : -1;
      } else if (c == '{') {
        ++i_;
        lo = number();
        hi = lo;
        if (lo >= 0 && !eof() && p_[i_] == ',') {
          ++i_;
          hi = number();
        }
        if (lo < 0 || eof() || p_[i_] != '}') {
          i_ = at;  // not a quantifier: '{' stands for itself (ECMAScript Annex B)
          return a;
        }
        ++i_;
        if (hi >= 0 && hi < lo) return error("quantifier {n,m} with m < n");
        if (lo > kMaxRepeat || hi > kMaxRepeat)
          return error("quantifier over " + std::to_string(kMaxRepeat) +
                       " (the pattern is too large)");
      } else {
        return a;
      }
      if (!eof() && p_[i_] == '?') ++i_;  // lazy: the same strings match
      const Re::Kind k = pool[(size_t)a].kind;
      if (k == Re::bol || k == Re::eol) return error("a quantifier on an anchor");
      Re r;
      r.kind = Re::repeat;
      r.kids = {a};
      r.min = (int32_t)lo;
      r.max = (int32_t)hi;
      a = add(std::move(r));
    }
  }

  Result<int32_t> atom() {
    const char c = p_[i_];
    switch (c) {
      case '(': {
        ++i_;
        if (!eof() && p_[i_] == '?') {
          const std::string_view rest = p_.substr(i_);
          if (rest.starts_with("?:")) {
            i_ += 2;
          } else if (rest.starts_with("?=") || rest.starts_with("?!")) {
            return error("lookahead '(" + std::string(rest.substr(0, 2)) + "' is not supported");
          } else if (rest.starts_with("?<=") || rest.starts_with("?<!")) {
            return error("lookbehind '(" + std::string(rest.substr(0, 3)) + "' is not supported");
          } else if (rest.starts_with("?<")) {
            const size_t close = rest.find('>');
            if (close == std::string_view::npos) return error("unterminated group name");
            i_ += close + 1;
          } else {
            return error("'(" + std::string(rest.substr(0, 2)) + "' is not supported");
          }
        }
        TRY_ASSIGN(int32_t inner, alternation());
        if (eof() || p_[i_] != ')') return error("missing ')'");
        ++i_;
        return inner;
      }
      case ')':
        return error("unbalanced ')'");
      case '*':
      case '+':
      case '?':
        return error(std::string("nothing to repeat before '") + c + "'");
      case '^':
      case '$': {
        ++i_;
        Re r;
        r.kind = c == '^' ? Re::bol : Re::eol;
        return add(std::move(r));
      }
      case '.':
        ++i_;
        return set(kDot);
      case '[':
        return char_class();
      case '\\': {
        ++i_;
        CharSet s;
        TRY(escape(false, s));
        return set(std::move(s));
      }
      default:
        if (c == '{') {  // a quantifier with nothing before it
          const size_t at = i_;
          ++i_;
          const int64_t n = number();
          if (n >= 0 && !eof() && (p_[i_] == '}' || p_[i_] == ',')) {
            i_ = at;
            return error("nothing to repeat before '{'");
          }
          i_ = at;
        }
        const uint32_t cp = next_cp();
        return set({{cp, cp}});
    }
  }

  int32_t set(CharSet s) {
    Re r;
    r.kind = Re::set;
    r.chars = normalized(std::move(s));
    return add(std::move(r));
  }

  Result<uint32_t> hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (eof() || !std::isxdigit((unsigned char)p_[i_])) return error("bad hex escape");
      const char h = p_[i_++];
      v = v * 16 + (uint32_t)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
  }

  // After a '\': the characters it stands for, added to `out`. In a class, \b is a
  // backspace and \- a hyphen.
  Status escape(bool in_class, CharSet& out) {
    if (eof()) return error("'\\' at the end of the pattern");
    const char c = p_[i_];
    const auto one = [&](uint32_t cp) {
      out.push_back({cp, cp});
      return ok_status();
    };
    ++i_;
    switch (c) {
      case 'd':
        out.insert(out.end(), kDigit.begin(), kDigit.end());
        return ok_status();
      case 'D':
        for (const auto& r : complement(kDigit)) out.push_back(r);
        return ok_status();
      case 'w':
        out.insert(out.end(), kWord.begin(), kWord.end());
        return ok_status();
      case 'W':
        for (const auto& r : complement(kWord)) out.push_back(r);
        return ok_status();
      case 's':
        out.insert(out.end(), kSpace.begin(), kSpace.end());
        return ok_status();
      case 'S':
        for (const auto& r : complement(kSpace)) out.push_back(r);
        return ok_status();
      case 't':
        return one('\t');
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case 'b':
        if (in_class) return one('\b');
        --i_;
        return error("word boundary '\\b' is not supported");
      case 'B':
        --i_;
        return error("word boundary '\\B' is not supported");
      case '0':
        if (!eof() && std::isdigit((unsigned char)p_[i_])) return error("octal escape");
        return one(0);
      case 'x': {
        TRY_ASSIGN(uint32_t v, hex(2));
        return one(v);
      }
      case 'u': {
        if (!eof() && p_[i_] == '{') {
          ++i_;
          uint32_t v = 0;
          int n = 0;
          while (!eof() && std::isxdigit((unsigned char)p_[i_]) && n < 7) {
            TRY_ASSIGN(uint32_t d, hex(1));
            v = v * 16 + d;
            ++n;
          }
          if (n == 0 || eof() || p_[i_] != '}' || v > kMaxCp) return error("bad \\u{...} escape");
          ++i_;
          return one(v);
        }
        TRY_ASSIGN(uint32_t v, hex(4));
        return one(v);
      }
      case 'k':
        --i_;
        return error("backreference '\\k' is not supported");
      case 'p':
      case 'P':
        --i_;
        return error(std::string("Unicode property escape '\\") + c + "' is not supported");
      case 'c':
        --i_;
        return error("control escape '\\c' is not supported");
      default:
        if (c >= '1' && c <= '9') {
          --i_;
          return error(std::string("backreference '\\") + c + "' is not supported");
        }
        if (std::isalnum((unsigned char)c)) {
          --i_;
          return error(std::string("unknown escape '\\") + c + "'");
        }
        --i_;
        return one(next_cp());  // an escaped syntax character, or any other one as itself
    }
  }

  Result<int32_t> char_class() {
    ++i_;  // '['
    bool negate = false;
    if (!eof() && p_[i_] == '^') {
      negate = true;
      ++i_;
    }
    CharSet s;
    // One class atom: a single character (returned) or a set from an escape (-1).
    auto class_atom = [&](CharSet& into) -> Result<int64_t> {
      if (p_[i_] == '\\') {
        ++i_;
        CharSet e;
        TRY(escape(true, e));
        if (e.size() == 1 && e[0].first == e[0].second) return (int64_t)e[0].first;
        into.insert(into.end(), e.begin(), e.end());
        return (int64_t)-1;
      }
      return (int64_t)next_cp();
    };
    while (!eof() && p_[i_] != ']') {
      TRY_ASSIGN(int64_t lo, class_atom(s));
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        TRY_ASSIGN(int64_t hi, class_atom(s));
        if (lo < 0 || hi < 0) {  // a class escape at an end: '-' stands for itself
          if (lo >= 0) s.push_back({(uint32_t)lo, (uint32_t)lo});
          if (hi >= 0) s.push_back({(uint32_t)hi, (uint32_t)hi});
          s.push_back({'-', '-'});
          continue;
        }
        if (hi < lo) return error("range out of order in a character class");
        s.push_back({(uint32_t)lo, (uint32_t)hi});
        continue;
      }
      if (lo >= 0) s.push_back({(uint32_t)lo, (uint32_t)lo});
    }
    if (eof()) return error("missing ']'");
    ++i_;
    s = normalized(std::move(s));
    return set(negate ? complement(s) : s);
  }

  std::string_view p_;
  size_t i_ = 0;
};

// --- Thompson NFA over bytes ---

struct Edge {
  enum Kind : uint8_t { bytes, eps, bol, eol };
  int32_t to;
  Kind kind;
  uint8_t lo = 0, hi = 0;
};

// The UTF-8 encodings of [lo, hi] (no surrogates inside) as sequences of byte ranges.
using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;

int encode(uint32_t cp, uint8_t* b) {
  if (cp < 0x80) {
    b[0] = (uint8_t)cp;
    return 1;
  }
  if (cp < 0x800) {
    b[0] = (uint8_t)(0xC0 | (cp >> 6));
    b[1] = (uint8_t)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    b[0] = (uint8_t)(0xE0 | (cp >> 12));
    b[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    b[2] = (uint8_t)(0x80 | (cp & 0x3F));
    return 3;
  }
  b[0] = (uint8_t)(0xF0 | (cp >> 18));
  b[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
  b[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
  b[3] = (uint8_t)(0x80 | (cp & 0x3F));
  return 4;
}

// Splits [lo, hi] until each piece's encodings are a product of byte ranges: first at the
// encoding lengths' limits, then where a continuation byte would not run over its full range.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteSeq>& out) {
  if (lo > hi) return;
  for (uint32_t m : {0x7Fu, 0x7FFu, 0xFFFFu})
    if (lo <= m && m < hi) {
      utf8_sequences(lo, m, out);
      utf8_sequences(m + 1, hi, out);
      return;
    }
  uint8_t a[4], b[4];
  const int n = encode(lo, a);
  encode(hi, b);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  ByteSeq s;
  for (int k = 0; k < n; ++k) s.emplace_back(a[k], b[k]);
  out.push_back(std::move(s));
}

class Nfa {
 public:
  explicit Nfa(const std::vector<Re>& pool) : pool_(pool) {}

  int32_t state() {
    out.emplace_back();
    return (int32_t)out.size() - 1;
  }
  void edge(int32_t from, Edge e) { out[(size_t)from].push_back(e); }

  // The fragment of node r: (start, end).
  Result<std::pair<int32_t, int32_t>> build(int32_t r) {
    if ((int32_t)out.size() > kMaxPatternNfaStates)
      return make_error("the pattern is too large (more than ",
                        std::to_string(kMaxPatternNfaStates), " NFA states)");
    const Re& re = pool_[(size_t)r];
    const int32_t s = state();
    switch (re.kind) {
      case Re::set: {
        const int32_t e = state();
        CharSet valid;  // surrogates are not characters
        for (auto [lo, hi] : re.chars) {
          if (lo <= 0xD7FF) valid.push_back({lo, std::min(hi, 0xD7FFu)});
          if (hi >= 0xE000) valid.push_back({std::max(lo, 0xE000u), hi});
        }
        std::vector<ByteSeq> seqs;
        for (auto [lo, hi] : valid) utf8_sequences(lo, hi, seqs);
        for (const ByteSeq& q : seqs) {
          int32_t at = s;
          for (size_t k = 0; k < q.size(); ++k) {
            const int32_t to = k + 1 == q.size() ? e : state();
            edge(at, {to, Edge::bytes, q[k].first, q[k].second});
            at = to;
          }
        }
        return std::make_pair(s, e);
      }
      case Re::bol:
      case Re::eol: {
        const int32_t e = state();
        edge(s, {e, re.kind == Re::bol ? Edge::bol : Edge::eol});
        return std::make_pair(s, e);
      }
      case Re::cat: {
        int32_t at = s;
        for (int32_t k : re.kids) {
          TRY_ASSIGN(auto f, build(k));
          edge(at, {f.first, Edge::eps});
          at = f.second;
        }
        return std::make_pair(s, at);
      }
      case Re::alt: {
        const int32_t e = state();
        for (int32_t k : re.kids) {
          TRY_ASSIGN(auto f, build(k));
          edge(s, {f.first, Edge::eps});
          edge(f.second, {e, Edge::eps});
        }
        return std::make_pair(s, e);
      }
      case Re::repeat: {
        int32_t at = s;
        for (int32_t k = 0; k < re.min; ++k) {
          TRY_ASSIGN(auto f, build(re.kids[0]));
          edge(at, {f.first, Edge::eps});
          at = f.second;
        }
        const int32_t e = state();
        if (re.max < 0) {  // a loop: at -> body -> at, or on to e
          TRY_ASSIGN(auto f, build(re.kids[0]));
          edge(at, {f.first, Edge::eps});
          edge(f.second, {at, Edge::eps});
          edge(at, {e, Edge::eps});
          return std::make_pair(s, e);
        }
        for (int32_t k = re.min; k < re.max; ++k) {  // optional copies, each may stop here
          TRY_ASSIGN(auto f, build(re.kids[0]));
          edge(at, {e, Edge::eps});
          edge(at, {f.first, Edge::eps});
          at = f.second;
        }
        edge(at, {e, Edge::eps});
        return std::make_pair(s, e);
      }
    }
    return std::make_pair(s, s);
  }

  std::vector<std::vector<Edge>> out;

 private:
  const std::vector<Re>& pool_;
};

// A byte JSON can put in a string's decoded value: not a control character, save those with
// a short escape (\b \t \n \f \r).
bool producible(int b) {
  return b >= 0x20 || b == 0x08 || b == 0x09 || b == 0x0A || b == 0x0C || b == 0x0D;
}

}  // namespace

Result<ByteDfa> compile_pattern(std::string_view pattern, int32_t min_chars, int32_t max_chars) {
  Parser parser(pattern);
  TRY_ASSIGN(int32_t root, parser.parse());
  // Search: anything, the pattern, anything.
  std::vector<Re>& pool = parser.pool;
  Re any;
  any.kind = Re::set;
  any.chars = {{0, kMaxCp}};
  pool.push_back(any);
  Re loop;
  loop.kind = Re::repeat;
  loop.kids = {(int32_t)pool.size() - 1};
  pool.push_back(loop);
  Re whole;
  whole.kind = Re::cat;
  whole.kids = {(int32_t)pool.size() - 1, root, (int32_t)pool.size() - 1};
  pool.push_back(whole);
  Nfa nfa(pool);
  TRY_ASSIGN(auto frag, nfa.build((int32_t)pool.size() - 1));
  const int32_t n_states = (int32_t)nfa.out.size();
  const int32_t final_state = frag.second;

  // Byte classes: bytes no edge tells apart, split where a byte stops beginning a character
  // and where bytes stop being producible.
  std::vector<uint8_t> cut(257, 0);
  cut[0] = cut[0x08] = cut[0x09] = cut[0x0B] = cut[0x0C] = cut[0x0E] = cut[0x20] = 1;
  cut[0x80] = cut[0xC0] = 1;
  for (const auto& edges : nfa.out)
    for (const Edge& e : edges)
      if (e.kind == Edge::bytes) cut[e.lo] = cut[(size_t)e.hi + 1] = 1;
  ByteDfa d;
  std::memset(d.cls, ByteDfa::kNone, sizeof d.cls);
  std::vector<uint8_t> rep;  // a byte of each class
  int32_t cls = -1;
  for (int b = 0; b < 256; ++b) {
    if (cut[(size_t)b]) {
      ++cls;
      rep.push_back((uint8_t)b);
    }
    if (producible(b)) d.cls[b] = (uint8_t)cls;
  }
  if (cls + 1 >= ByteDfa::kNone) return make_error("the pattern is too large (byte classes)");
  d.n_classes = cls + 1;

  // The subset construction. Only the start may pass ^; an accepting state reaches the end
  // through $ too.
  std::vector<int32_t> stamp((size_t)n_states, -1);
  int32_t gen = 0;
  auto closure = [&](std::vector<int32_t> set, bool at_start, bool at_end) {
    ++gen;
    std::vector<int32_t> todo = set;
    set.clear();
    for (int32_t s : todo) stamp[(size_t)s] = gen;
    while (!todo.empty()) {
      const int32_t s = todo.back();
      todo.pop_back();
      set.push_back(s);
      for (const Edge& e : nfa.out[(size_t)s]) {
        const bool pass = e.kind == Edge::eps || (e.kind == Edge::bol && at_start) ||
                          (e.kind == Edge::eol && at_end);
        if (pass && stamp[(size_t)e.to] != gen) {
          stamp[(size_t)e.to] = gen;
          todo.push_back(e.to);
        }
      }
    }
    std::sort(set.begin(), set.end());
    return set;
  };
  std::map<std::pair<std::vector<int32_t>, bool>, int32_t> ids;
  std::vector<std::pair<std::vector<int32_t>, bool>> order;
  order.emplace_back(closure({frag.first}, true, false), true);
  ids[order[0]] = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const auto [set, at_start] = order[k];
    const std::vector<int32_t> end = closure(set, at_start, true);
    d.accept.push_back(std::binary_search(end.begin(), end.end(), final_state));
    for (int32_t c = 0; c < d.n_classes; ++c) {
      const uint8_t b = rep[(size_t)c];
      std::vector<int32_t> moved;
      if (producible(b))
        for (int32_t s : set)
          for (const Edge& e : nfa.out[(size_t)s])
            if (e.kind == Edge::bytes && e.lo <= b && b <= e.hi) moved.push_back(e.to);
      if (moved.empty()) {
        d.next.push_back(-1);
        continue;
      }
      auto key = std::make_pair(closure(std::move(moved), false, false), false);
      const auto [it, added] = ids.emplace(key, (int32_t)order.size());
      if (added) {
        if ((int32_t)order.size() >= kMaxPatternDfaStates)
          return make_error("the pattern is too large (more than ",
                            std::to_string(kMaxPatternDfaStates), " automaton states)");
        order.push_back(std::move(key));
      }
      d.next.push_back(it->second);
    }
  }
  if (!trim_dfa(d)) return make_error("no string a JSON value can hold matches the pattern");
  minimize_dfa(d);
  if (min_chars > 0 || max_chars >= 0) {
    auto limited = limit_length(d, min_chars, max_chars, kMaxPatternDfaStates);
    if (!limited.ok())
      return make_error("the pattern with minLength/maxLength: ", limited.error().message);
    d = std::move(*limited);
  }
  mark_free(d);
  return d;
}

}  // namespace infercept::grammar
