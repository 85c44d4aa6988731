#include "tokenizer/pretokenize.h"

#include <string>

#include "tokenizer/unicode.h"

namespace infercept {
namespace {

constexpr uint8_t kL = unicode::kLetter;
constexpr uint8_t kN = unicode::kNumber;
constexpr uint8_t kW = unicode::kWhitespace;
constexpr uint8_t kIn = 0x80;  // inside the split (beyond its end, flags are all zero)

// A view over one split with flags that read as zero past the end.
struct Scan {
  const uint32_t* c;
  size_t n;
  uint8_t flags(size_t i) const { return i < n ? (unicode::cpt_flags(c[i]) | kIn) : 0; }
  uint32_t cpt(size_t i) const { return i < n ? c[i] : 0xFFFFFFFFu; }
};

uint32_t ascii_lower(uint32_t c) {
  return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

// Length of a contraction ('s 't 're 've 'm 'll 'd) at pos, 0 if none.
size_t contraction_len(const Scan& s, size_t pos, bool case_insensitive) {
  if (s.cpt(pos) != '\'' || pos + 1 >= s.n) return 0;
  auto low = [&](size_t i) { return case_insensitive ? ascii_lower(s.cpt(i)) : s.cpt(i); };
  const uint32_t a = low(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= s.n) return 0;
  const uint32_t b = low(pos + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

using Words = std::vector<std::pair<size_t, size_t>>;

void split_gpt2(const Scan& s, size_t base, Words& out) {
  size_t pos = 0;
  auto emit = [&](size_t start, size_t end) { out.emplace_back(base + start, base + end); };
  while (pos < s.n) {
    const size_t start = pos;
    const uint32_t c = s.cpt(pos);
    if (const size_t k = contraction_len(s, pos, false)) {
      emit(start, pos + k);
      pos += k;
      continue;
    }
    const uint8_t f2 = c == ' ' ? s.flags(pos + 1) : s.flags(pos);
    if (f2 & kL) {  // ' ?\p{L}+'
      pos += c == ' ';
      while (s.flags(pos) & kL) ++pos;
      emit(start, pos);
      continue;
    }
    if (f2 & kN) {  // ' ?\p{N}+'
      pos += c == ' ';
      while (s.flags(pos) & kN) ++pos;
      emit(start, pos);
      continue;
    }
    if ((f2 & kIn) && !(f2 & (kW | kL | kN))) {  // ' ?[^\s\p{L}\p{N}]+'
      pos += c == ' ';
      for (uint8_t f = s.flags(pos); (f & kIn) && !(f & (kW | kL | kN)); f = s.flags(++pos)) {
      }
      emit(start, pos);
      continue;
    }
    size_t nw = 0;
    while (s.flags(pos + nw) & kW) ++nw;
    if (nw > 1 && pos + nw < s.n) {  // '\s+(?!\S)': leave the last space to the next word
      pos += nw - 1;
      emit(start, pos);
      continue;
    }
    if (nw > 0) {  // '\s+'
      pos += nw;
      emit(start, pos);
      continue;
    }
    ++pos;  // nothing matched: a word of one code point
    emit(start, pos);
  }
}

void split_llama3(const Scan& s, size_t base, size_t max_digits, Words& out) {
  size_t pos = 0;
  auto emit = [&](size_t start, size_t end) { out.emplace_back(base + start, base + end); };
  auto is_crlf = [](uint32_t c) { return c == '\r' || c == '\n'; };
  while (pos < s.n) {
    const size_t start = pos;
    const uint32_t c = s.cpt(pos);
    const uint8_t f = s.flags(pos);
    if (const size_t k = contraction_len(s, pos, true)) {
      emit(start, pos + k);
      pos += k;
      continue;
    }
    // '[^\r\n\p{L}\p{N}]?\p{L}+'
    if (!is_crlf(c) && !(f & kN) && ((f & kL) || (s.flags(pos + 1) & kL))) {
      ++pos;
      while (s.flags(pos) & kL) ++pos;
      emit(start, pos);
      continue;
    }
    // '\p{N}{1,max_digits}'
    if (f & kN) {
      size_t ini = pos;
      while (s.flags(pos) & kN) {
        if (++pos - ini >= max_digits) {
          emit(ini, pos);
          ini = pos;
        }
      }
      if (pos > ini) emit(ini, pos);
      continue;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    const uint8_t f2 = c == ' ' ? s.flags(pos + 1) : f;
    if ((f2 & kIn) && !(f2 & (kW | kL | kN))) {
      pos += c == ' ';
      for (uint8_t g = s.flags(pos); (g & kIn) && !(g & (kW | kL | kN)); g = s.flags(++pos)) {
      }
      while (pos < s.n && is_crlf(s.cpt(pos))) ++pos;
      emit(start, pos);
      continue;
    }
    size_t nw = 0;
    size_t last_crlf_end = 0;
    while (s.flags(pos + nw) & kW) {
      if (is_crlf(s.cpt(pos + nw))) last_crlf_end = pos + nw + 1;
      ++nw;
    }
    if (last_crlf_end > 0) {  // '\s*[\r\n]+'
      pos = last_crlf_end;
      emit(start, pos);
      continue;
    }
    if (nw > 1 && pos + nw < s.n) {  // '\s+(?!\S)'
      pos += nw - 1;
      emit(start, pos);
      continue;
    }
    if (nw > 0) {  // '\s+'
      pos += nw;
      emit(start, pos);
      continue;
    }
    ++pos;
    emit(start, pos);
  }
}

}  // namespace

std::optional<PreTokenizer> pre_tokenizer_from_name(std::string_view name) {
  static const std::pair<std::string_view, PreTokenizer> kNames[] = {
      {"gpt2", PreTokenizer::gpt2},        {"default", PreTokenizer::gpt2},
      {"gpt-2", PreTokenizer::gpt2},       {"mpt", PreTokenizer::gpt2},
      {"olmo", PreTokenizer::gpt2},        {"smollm", PreTokenizer::smollm},
      {"starcoder", PreTokenizer::smollm}, {"refact", PreTokenizer::smollm},
      {"codeshell", PreTokenizer::smollm}, {"llama3", PreTokenizer::llama3},
      {"llama-bpe", PreTokenizer::llama3}, {"llama-v3", PreTokenizer::llama3},
      {"smaug-bpe", PreTokenizer::llama3}, {"dbrx", PreTokenizer::llama3},
      {"qwen2", PreTokenizer::qwen2},      {"stablelm2", PreTokenizer::qwen2},
  };
  for (const auto& [n, kind] : kNames) {
    if (n == name) return kind;
  }
  return std::nullopt;
}

void pre_tokenize(PreTokenizer kind, const uint32_t* cpts, size_t n, Words& words) {
  switch (kind) {
    case PreTokenizer::gpt2:
      split_gpt2(Scan{cpts, n}, 0, words);
      return;
    case PreTokenizer::llama3:
      split_llama3(Scan{cpts, n}, 0, 3, words);
      return;
    case PreTokenizer::qwen2:
      split_llama3(Scan{cpts, n}, 0, 1, words);
      return;
    case PreTokenizer::smollm: {
      size_t start = 0;
      for (size_t i = 0; i < n; ++i) {
        if (!unicode::is_number(cpts[i])) continue;
        if (i > start) split_gpt2(Scan{cpts + start, i - start}, start, words);
        words.emplace_back(i, i + 1);
        start = i + 1;
      }
      if (n > start) split_gpt2(Scan{cpts + start, n - start}, start, words);
      return;
    }
  }
}

}  // namespace infercept
