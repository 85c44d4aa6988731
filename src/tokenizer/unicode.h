// UTF-8 helpers and the Unicode category flags the pre-tokenizers need (\p{L}, \p{N}, \s).
// The flag table is generated from Python's unicodedata by scripts/gen_unicode_tables.py
// (unicode_tables.inc) so no regex engine is needed: the pre-tokenizers are hand-written
// scanners over code points.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace infercept::unicode {

enum : uint8_t {
  kLetter = 1,      // \p{L}
  kNumber = 2,      // \p{N}
  kWhitespace = 4,  // \s (White_Space)
};

// Flags of a code point (0 for everything that is none of the above).
uint8_t cpt_flags(uint32_t cpt);

inline bool is_letter(uint32_t c) {
  return cpt_flags(c) & kLetter;
}
inline bool is_number(uint32_t c) {
  return cpt_flags(c) & kNumber;
}
inline bool is_whitespace(uint32_t c) {
  return cpt_flags(c) & kWhitespace;
}

// Decodes one code point at s[pos] and advances pos. An invalid or truncated sequence
// yields U+FFFD and advances by one byte (the behaviour llama.cpp has, so token ids match).
uint32_t decode_utf8(std::string_view s, size_t& pos);
std::vector<uint32_t> decode_utf8_all(std::string_view s);
void append_utf8(std::string& out, uint32_t cpt);

// Length of the UTF-8 sequence announced by a lead byte (1 for an invalid lead byte).
inline size_t utf8_seq_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Length of the longest prefix of `s` that is whole UTF-8 characters, treating only an
// incomplete (but so far valid) sequence at the very end as "not yet whole".
size_t complete_utf8_prefix(std::string_view s);

// Replaces invalid UTF-8 bytes with U+FFFD (one per invalid byte).
std::string sanitize_utf8(std::string_view s);

}  // namespace infercept::unicode
