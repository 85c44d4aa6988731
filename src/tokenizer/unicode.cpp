#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace infercept::unicode {
namespace {

struct Range {
  uint32_t first;
  uint32_t last;
  uint8_t flags;
};

constexpr Range kRanges[] = {
#include "tokenizer/unicode_tables.inc"
};

// ASCII is by far the most frequent input; look it up in a flat table.
constexpr std::array<uint8_t, 128> make_ascii_flags() {
  std::array<uint8_t, 128> t{};
  for (const Range& r : kRanges) {
    for (uint32_t c = r.first; c <= r.last && c < 128; ++c) t[c] = r.flags;
  }
  return t;
}
constexpr std::array<uint8_t, 128> kAsciiFlags = make_ascii_flags();

}  // namespace

uint8_t cpt_flags(uint32_t cpt) {
  if (cpt < 128) return kAsciiFlags[cpt];
  const Range* end = kRanges + sizeof(kRanges) / sizeof(kRanges[0]);
  const Range* it =
      std::upper_bound(kRanges, end, cpt, [](uint32_t c, const Range& r) { return c < r.first; });
  if (it == kRanges) return 0;
  --it;
  return cpt <= it->last ? it->flags : 0;
}

uint32_t decode_utf8(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  size_t len = 0;
  uint32_t cpt = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    cpt = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    cpt = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    cpt = b0 & 0x07;
  } else {
    ++pos;
    return 0xFFFD;
  }
  if (pos + len > s.size()) {
    ++pos;
    return 0xFFFD;
  }
  for (size_t i = 1; i < len; ++i) {
    const auto b = static_cast<uint8_t>(s[pos + i]);
    if ((b & 0xC0) != 0x80) {
      ++pos;
      return 0xFFFD;
    }
    cpt = (cpt << 6) | (b & 0x3F);
  }
  pos += len;
  return cpt;
}

std::vector<uint32_t> decode_utf8_all(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) out.push_back(decode_utf8(s, pos));
  return out;
}

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

namespace {
// Strict validity of the sequence at s[pos] (overlongs, surrogates and > U+10FFFF are
// invalid). Returns its length, 0 when invalid, or -1 when it is a valid but truncated
// prefix that runs into the end of `s`.
int valid_seq_len(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return 1;
  int len = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // bounds of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int i = 1; i < len; ++i) {
    if (pos + i >= s.size()) return -1;
    const auto b = static_cast<uint8_t>(s[pos + i]);
    if (i == 1 ? (b < lo || b > hi) : ((b & 0xC0) != 0x80)) return 0;
  }
  return len;
}
}  // namespace

size_t complete_utf8_prefix(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const int len = valid_seq_len(s, pos);
    if (len < 0) return pos;  // truncated at the end: hold back
    pos += len == 0 ? 1 : static_cast<size_t>(len);
  }
  return pos;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const int len = valid_seq_len(s, pos);
    if (len <= 0) {
      out += "\xEF\xBF\xBD";
      ++pos;
    } else {
      out.append(s.substr(pos, static_cast<size_t>(len)));
      pos += static_cast<size_t>(len);
    }
  }
  return out;
}

}  // namespace infercept::unicode
