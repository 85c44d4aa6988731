#include "tokenizer/jinja/str_ops.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace infercept::jinja {

bool py_isspace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

std::vector<size_t> cpt_offsets(std::string_view s) {
  std::vector<size_t> off;
  off.reserve(s.size() + 1);
  size_t i = 0;
  while (i < s.size()) {
    off.push_back(i);
    i += std::max<size_t>(1, unicode::utf8_seq_len(uint8_t(s[i])));
    i = std::min(i, s.size());
  }
  off.push_back(s.size());
  return off;
}

namespace {

uint32_t cpt_at(std::string_view s, size_t pos) {
  return unicode::decode_utf8(s, pos);
}

bool in_chars(uint32_t c, const std::optional<std::string>& chars) {
  if (!chars) return py_isspace(c);
  for (uint32_t x : unicode::decode_utf8_all(*chars))
    if (x == c) return true;
  return false;
}

uint32_t to_upper(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 32;
  if (c == 0xff) return 0x178;
  if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) return c - 32;
  if (c >= 0x430 && c <= 0x44f) return c - 32;
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  return c;
}
uint32_t to_lower(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xc0 && c <= 0xde && c != 0xd7)) return c + 32;
  if (c == 0x178) return 0xff;
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 32;
  if (c >= 0x410 && c <= 0x42f) return c + 32;
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  return c;
}
bool is_cased(uint32_t c) {
  return to_upper(c) != c || to_lower(c) != c || c == 0xdf;
}

}  // namespace

Str py_strip(const Str& s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::vector<size_t> off = cpt_offsets(s.text);
  size_t b = 0, e = off.size() - 1;  // code point indices
  if (left)
    while (b < e && in_chars(cpt_at(s.text, off[b]), chars)) ++b;
  if (right)
    while (e > b && in_chars(cpt_at(s.text, off[e - 1]), chars)) --e;
  return s.substr(off[b], off[e]);
}

std::vector<Str> py_split(const Str& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<Str> out;
  const std::string& t = s.text;
  if (sep) {
    if (sep->empty()) fail("split: empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
      const size_t f = t.find(*sep, pos);
      if (f == std::string::npos) break;
      out.push_back(s.substr(pos, f));
      pos = f + sep->size();
    }
    out.push_back(s.substr(pos, t.size()));
    return out;
  }
  const std::vector<size_t> off = cpt_offsets(t);
  const size_t n = off.size() - 1;
  size_t i = 0;
  while (i < n) {
    while (i < n && py_isspace(cpt_at(t, off[i]))) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
      size_t e = n;
      while (e > i && py_isspace(cpt_at(t, off[e - 1]))) --e;
      out.push_back(s.substr(off[i], off[e]));
      break;
    }
    const size_t b = i;
    while (i < n && !py_isspace(cpt_at(t, off[i]))) ++i;
    out.push_back(s.substr(off[b], off[i]));
  }
  return out;
}

std::vector<Str> py_rsplit(const Str& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0 || !sep) {
    if (maxsplit < 0) return py_split(s, sep, maxsplit);
  }
  std::vector<Str> out;
  const std::string& t = s.text;
  if (sep) {
    if (sep->empty()) fail("rsplit: empty separator");
    size_t end = t.size();
    while (int64_t(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t f = t.rfind(*sep, end - sep->size());
      if (f == std::string::npos) break;
      out.push_back(s.substr(f + sep->size(), end));
      end = f;
    }
    out.push_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  const std::vector<size_t> off = cpt_offsets(t);
  size_t i = off.size() - 1;
  while (i > 0) {
    while (i > 0 && py_isspace(cpt_at(t, off[i - 1]))) --i;
    if (i == 0) break;
    if (int64_t(out.size()) == maxsplit) {
      size_t b = 0;
      while (b < i && py_isspace(cpt_at(t, off[b]))) ++b;
      out.push_back(s.substr(off[b], off[i]));
      break;
    }
    const size_t e = i;
    while (i > 0 && !py_isspace(cpt_at(t, off[i - 1]))) --i;
    out.push_back(s.substr(off[i], off[e]));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

Str py_replace(const Str& s, const Str& old, const Str& repl, int64_t count) {
  Str out;
  const std::string& t = s.text;
  if (old.text.empty()) {
    // Python inserts the replacement before every character and at the end.
    const std::vector<size_t> off = cpt_offsets(t);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < off.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(repl);
        ++done;
      }
      out.append(s.substr(off[i], off[i + 1]));
    }
    if (count < 0 || done < count) out.append(repl);
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t f = t.find(old.text, pos);
    if (f == std::string::npos) break;
    out.append(s.substr(pos, f));
    out.append(repl);
    pos = f + old.text.size();
    ++done;
  }
  out.append(s.substr(pos, t.size()));
  return out;
}

Str py_case(const Str& s, CaseMap how) {
  Str out;
  const std::string& t = s.text;
  size_t i = 0;
  bool word_start = true;  // title: the next cased letter starts a word
  bool first = true;
  while (i < t.size()) {
    const size_t b = i;
    const uint32_t c = unicode::decode_utf8(t, i);
    uint32_t m = c;
    switch (how) {
      case CaseMap::upper:
        m = to_upper(c);
        break;
      case CaseMap::lower:
        m = to_lower(c);
        break;
      case CaseMap::capitalize:
        m = first ? to_upper(c) : to_lower(c);
        break;
      case CaseMap::title_method:
        m = word_start ? to_upper(c) : to_lower(c);
        word_start = !is_cased(c);
        break;
      case CaseMap::title_filter:
        m = word_start ? to_upper(c) : to_lower(c);
        word_start = py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        break;
    }
    first = false;
    std::string piece;
    if (m == c) {
      piece = t.substr(b, i - b);
    } else {
      unicode::append_utf8(piece, m);
    }
    out.append(piece, s.tainted_at(b));
  }
  return out;
}

std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start,
                                   std::optional<int64_t> stop, int64_t step) {
  if (step == 0) fail("slice step cannot be zero");
  std::vector<int64_t> idx;
  auto clamp = [&](int64_t v, int64_t lo, int64_t hi) { return std::max(lo, std::min(hi, v)); };
  int64_t b, e;
  if (step > 0) {
    b = start ? (*start < 0 ? clamp(*start + n, 0, n) : clamp(*start, 0, n)) : 0;
    e = stop ? (*stop < 0 ? clamp(*stop + n, 0, n) : clamp(*stop, 0, n)) : n;
    for (int64_t k = b; k < e; k += step) idx.push_back(k);
  } else {
    b = start ? (*start < 0 ? clamp(*start + n, -1, n - 1) : clamp(*start, -1, n - 1)) : n - 1;
    e = stop ? (*stop < 0 ? clamp(*stop + n, -1, n - 1) : clamp(*stop, -1, n - 1)) : -1;
    for (int64_t k = b; k > e; k += step) idx.push_back(k);
  }
  return idx;
}

Str py_slice(const Str& s, std::optional<int64_t> start, std::optional<int64_t> stop,
             int64_t step) {
  const std::vector<size_t> off = cpt_offsets(s.text);
  const int64_t n = int64_t(off.size()) - 1;
  const std::vector<int64_t> idx = slice_indices(n, start, stop, step);
  if (step == 1) {
    if (idx.empty()) return Str{};
    return s.substr(off[size_t(idx.front())], off[size_t(idx.back()) + 1]);
  }
  Str out;
  for (int64_t k : idx) out.append(s.substr(off[size_t(k)], off[size_t(k) + 1]));
  return out;
}

}  // namespace infercept::jinja
