// Tokenizer: byte-level BPE (GPT-2 family) and SentencePiece-style BPE (Llama 2).
//
// Encoding runs in three stages:
//   1. special tokens (control and user-defined) are cut out of the text, longest first,
//      so "<|im_start|>" becomes one id (control ones only when parse_special, and never
//      inside the literal ranges a chat prompt marks as client text);
//   2. byte_bpe: each remaining fragment is split into words by the pre-tokenizer, each
//      word's bytes are mapped to GPT-2's printable code points and merged by merge rank
//      (lowest rank first, leftmost on ties); spm: spaces become "▁" and the fragment's
//      characters are merged by the score of the resulting token (highest first), with
//      characters that never became a token falling back to <0xNN> byte tokens;
//   3. byte_bpe words are cached, since text repeats words a lot.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <queue>
#include <string>
#include <unordered_map>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace infercept {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // "▁" U+2581

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// GPT-2's byte -> code point map: printable Latin-1 bytes map to themselves, the other 68
// bytes to U+0100 onwards, in byte order.
std::vector<uint32_t> byte_to_cpt_table() {
  std::vector<uint32_t> t(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    t[b] = printable ? b : next++;
  }
  return t;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xAB>" -> 0xAB, else -1.
int parse_byte_token(std::string_view s) {
  if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return -1;
  const int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

struct Fragment {
  int32_t token = -1;  // >= 0: a special token; else raw text [begin, end)
  size_t begin = 0;
  size_t end = 0;
};

}  // namespace

struct Tokenizer::Impl {
  TokenizerSpec spec;
  PreTokenizer pre = PreTokenizer::gpt2;
  bool ignore_merges = false;  // llama3: a word that is a whole token is not merged
  TokenMap token_to_id;
  std::vector<std::string> token_bytes;  // decoded bytes of normal tokens

  // byte_bpe
  std::vector<std::string> byte_chars;  // byte -> its GPT-2 code point as UTF-8
  std::vector<int32_t> byte_char_id;    // byte -> id of that one-character token (-1: none)
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  std::unordered_map<uint64_t, Merge> merges;  // (left id << 32 | right id) -> merge

  // spm
  std::vector<int32_t> byte_token;  // byte -> id of <0xNN> (-1: none)

  // Special tokens cut out before BPE, longest text first.
  std::vector<int32_t> specials;

  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  TokenType type(int32_t id) const {
    return spec.types.empty() ? TokenType::normal : spec.types[static_cast<size_t>(id)];
  }

  size_t max_token_bytes = 1;

  std::vector<Fragment> partition(std::string_view text, bool parse_special,
                                  std::span<const TextSpan> literal) const;
  void encode_bpe_fragment(std::string_view text, std::vector<int32_t>& out) const;
  void bpe_word(const std::string& word, std::vector<int32_t>& out) const;
  void encode_spm_fragment(const std::string& text, std::vector<int32_t>& out) const;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::create(TokenizerSpec spec) {
  auto impl = std::make_unique<Impl>();
  const size_t n = spec.tokens.size();
  if (n == 0) return make_error("tokenizer: the vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return make_error("tokenizer: vocabulary too large");
  if (!spec.scores.empty() && spec.scores.size() != n) {
    return make_error("tokenizer: ", std::to_string(spec.scores.size()), " scores for ",
                      std::to_string(n), " tokens");
  }
  if (!spec.types.empty() && spec.types.size() != n) {
    return make_error("tokenizer: ", std::to_string(spec.types.size()), " token types for ",
                      std::to_string(n), " tokens");
  }
  const auto n32 = static_cast<int32_t>(n);
  for (const auto& [name, id] : {std::pair<const char*, int32_t>{"bos", spec.bos_id},
                                 {"eos", spec.eos_id},
                                 {"unk", spec.unk_id},
                                 {"pad", spec.pad_id}}) {
    if (id < -1 || id >= n32) {
      return make_error("tokenizer: ", name, " id ", std::to_string(id),
                        " is outside the vocabulary of ", std::to_string(n), " tokens");
    }
  }
  for (int32_t id : spec.eot_ids) {
    if (id < 0 || id >= n32) {
      return make_error("tokenizer: end-of-turn id ", std::to_string(id), " is out of range");
    }
  }
  if (spec.kind == TokenizerKind::byte_bpe) {
    auto pre = pre_tokenizer_from_name(spec.pre);
    if (!pre) {
      return make_error("tokenizer: unsupported pre-tokenizer '", spec.pre,
                        "' (supported: gpt2, default, smollm, starcoder, llama3, llama-bpe, "
                        "qwen2, stablelm2)");
    }
    impl->pre = *pre;
    impl->ignore_merges = *pre == PreTokenizer::llama3;
  }

  impl->token_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) impl->token_to_id[spec.tokens[i]] = static_cast<int32_t>(i);

  if (spec.kind == TokenizerKind::byte_bpe) {
    const std::vector<uint32_t> b2c = byte_to_cpt_table();
    std::unordered_map<uint32_t, uint8_t> c2b;
    impl->byte_chars.resize(256);
    impl->byte_char_id.assign(256, -1);
    for (uint32_t b = 0; b < 256; ++b) {
      unicode::append_utf8(impl->byte_chars[b], b2c[b]);
      c2b[b2c[b]] = static_cast<uint8_t>(b);
      auto it = impl->token_to_id.find(impl->byte_chars[b]);
      if (it != impl->token_to_id.end()) impl->byte_char_id[b] = it->second;
    }
    int32_t rank = 0;
    for (const std::string& m : spec.merges) {
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) {
        return make_error("tokenizer: merge ", std::to_string(rank), " ('", m,
                          "') is not of the form 'left right'");
      }
      const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
      auto l = impl->token_to_id.find(left);
      auto r = impl->token_to_id.find(right);
      auto res = impl->token_to_id.find(std::string(left) + std::string(right));
      if (l != impl->token_to_id.end() && r != impl->token_to_id.end() &&
          res != impl->token_to_id.end()) {
        const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l->second)) << 32) |
                             static_cast<uint32_t>(r->second);
        impl->merges.emplace(key, Impl::Merge{rank, res->second});  // first (lowest rank) wins
      }
      ++rank;
    }
    impl->token_bytes.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const std::string& t = spec.tokens[i];
      std::string& out = impl->token_bytes[i];
      size_t pos = 0;
      while (pos < t.size()) {
        const size_t start = pos;
        const uint32_t c = unicode::decode_utf8(t, pos);
        auto it = c2b.find(c);
        if (it != c2b.end()) {
          out += static_cast<char>(it->second);
        } else {
          out.append(t, start, pos - start);  // not a byte char: keep as is
        }
      }
    }
  } else {
    impl->byte_token.assign(256, -1);
    impl->token_bytes.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const std::string& t = spec.tokens[i];
      const int b = parse_byte_token(t);
      const TokenType ty = spec.types.empty() ? TokenType::normal : spec.types[i];
      if (b >= 0 && (ty == TokenType::byte || spec.types.empty())) {
        if (impl->byte_token[static_cast<size_t>(b)] < 0) {
          impl->byte_token[static_cast<size_t>(b)] = static_cast<int32_t>(i);
        }
        impl->token_bytes[i] = std::string(1, static_cast<char>(b));
        continue;
      }
      std::string& out = impl->token_bytes[i];
      size_t pos = 0;
      while (pos < t.size()) {
        const size_t next = t.find(kSpmSpace, pos);
        if (next == std::string::npos) {
          out.append(t, pos, std::string::npos);
          break;
        }
        out.append(t, pos, next - pos);
        out += ' ';
        pos = next + kSpmSpace.size();
      }
    }
  }

  for (size_t i = 0; i < n; ++i) {
    const TokenType ty = spec.types.empty() ? TokenType::normal : spec.types[i];
    if ((ty == TokenType::control || ty == TokenType::user_defined) && !spec.tokens[i].empty()) {
      impl->specials.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(impl->specials.begin(), impl->specials.end(), [&](int32_t a, int32_t b) {
    return spec.tokens[static_cast<size_t>(a)].size() > spec.tokens[static_cast<size_t>(b)].size();
  });
  for (size_t i = 0; i < n; ++i) {
    const TokenType ty = spec.types.empty() ? TokenType::normal : spec.types[i];
    const bool special = ty == TokenType::control || ty == TokenType::user_defined;
    impl->max_token_bytes = std::max(impl->max_token_bytes,
                                     special ? spec.tokens[i].size() : impl->token_bytes[i].size());
  }
  impl->spec = std::move(spec);
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

namespace {

// Whether [begin, end) overlaps one of the sorted, disjoint spans.
bool overlaps(std::span<const TextSpan> spans, size_t begin, size_t end) {
  auto it = std::partition_point(spans.begin(), spans.end(),
                                 [&](const TextSpan& s) { return s.end <= begin; });
  return it != spans.end() && it->begin < end;
}

}  // namespace

std::vector<Fragment> Tokenizer::Impl::partition(std::string_view text, bool parse_special,
                                                 std::span<const TextSpan> literal) const {
  std::vector<Fragment> frags;
  frags.push_back(Fragment{-1, 0, text.size()});
  std::vector<Fragment> next;
  for (int32_t id : specials) {
    // Without parse_special only user-defined tokens are cut out (as Hugging Face does for
    // added tokens that are not special); in literal text likewise.
    const bool control = type(id) == TokenType::control;
    if (!parse_special && control) continue;
    const bool guarded = control && !literal.empty();
    const std::string& piece = spec.tokens[static_cast<size_t>(id)];
    if (text.find(piece) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view window = text.substr(0, f.end);
      size_t pos = f.begin;  // start of the text not cut yet
      size_t from = f.begin;
      while (from < f.end) {
        const size_t hit = window.find(piece, from);
        if (hit == std::string_view::npos) break;
        if (guarded && overlaps(literal, hit, hit + piece.size())) {
          from = hit + 1;  // client text: not a token; a real one may start inside this hit
          continue;
        }
        if (hit > pos) next.push_back(Fragment{-1, pos, hit});
        next.push_back(Fragment{id, hit, hit + piece.size()});
        pos = from = hit + piece.size();
      }
      if (pos < f.end) next.push_back(Fragment{-1, pos, f.end});
    }
    frags.swap(next);
  }
  return frags;
}

void Tokenizer::Impl::bpe_word(const std::string& word, std::vector<int32_t>& out) const {
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache.find(word);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  std::string mapped;
  if (ignore_merges) {
    for (unsigned char b : word) mapped += byte_chars[b];
  }
  auto whole = ignore_merges ? token_to_id.find(mapped) : token_to_id.end();
  if (whole != token_to_id.end()) {
    ids.push_back(whole->second);
  } else {
    // Doubly linked list of symbols, one per byte to start with.
    struct Sym {
      int32_t id;
      int32_t prev;
      int32_t next;
    };
    std::vector<Sym> syms(word.size());
    for (size_t i = 0; i < word.size(); ++i) {
      syms[i] = Sym{byte_char_id[static_cast<unsigned char>(word[i])], static_cast<int32_t>(i) - 1,
                    i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1};
    }
    struct Cand {
      int32_t rank;
      int32_t left;
      int32_t left_id;
      int32_t right_id;
      bool operator<(const Cand& o) const {  // max-heap: lowest rank, then leftmost, on top
        return rank != o.rank ? rank > o.rank : left > o.left;
      }
    };
    std::priority_queue<Cand> queue;
    auto try_add = [&](int32_t left) {
      if (left < 0) return;
      const int32_t right = syms[static_cast<size_t>(left)].next;
      if (right < 0) return;
      const int32_t a = syms[static_cast<size_t>(left)].id, b = syms[static_cast<size_t>(right)].id;
      if (a < 0 || b < 0) return;
      auto it = merges.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) |
                            static_cast<uint32_t>(b));
      if (it != merges.end()) queue.push(Cand{it->second.rank, left, a, b});
    };
    for (size_t i = 0; i + 1 < word.size(); ++i) try_add(static_cast<int32_t>(i));
    while (!queue.empty()) {
      const Cand c = queue.top();
      queue.pop();
      Sym& l = syms[static_cast<size_t>(c.left)];
      if (l.id != c.left_id || l.next < 0) continue;  // stale
      Sym& r = syms[static_cast<size_t>(l.next)];
      if (r.id != c.right_id) continue;
      const uint64_t key =
          (static_cast<uint64_t>(static_cast<uint32_t>(l.id)) << 32) | static_cast<uint32_t>(r.id);
      l.id = merges.at(key).result;
      r.id = -2;  // dead
      l.next = r.next;
      if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.left;
      try_add(l.prev);
      try_add(c.left);
    }
    for (int32_t i = word.empty() ? -1 : 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
      const int32_t id = syms[static_cast<size_t>(i)].id;
      if (id >= 0) {
        ids.push_back(id);
      } else if (spec.unk_id >= 0) {
        ids.push_back(spec.unk_id);  // a byte with no token: only in broken vocabularies
      }
    }
  }
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mu);
  if (cache.size() > 200000) cache.clear();
  cache.emplace(word, std::move(ids));
}

void Tokenizer::Impl::encode_bpe_fragment(std::string_view text, std::vector<int32_t>& out) const {
  const std::vector<uint32_t> cpts = unicode::decode_utf8_all(text);
  std::vector<std::pair<size_t, size_t>> words;
  pre_tokenize(pre, cpts.data(), cpts.size(), words);
  std::string word;
  for (const auto& [b, e] : words) {
    word.clear();
    for (size_t i = b; i < e; ++i) unicode::append_utf8(word, cpts[i]);
    bpe_word(word, out);
  }
}

void Tokenizer::Impl::encode_spm_fragment(const std::string& text,
                                          std::vector<int32_t>& out) const {
  // Symbols are the UTF-8 characters of the text; a merge joins two neighbours when their
  // concatenation is a token, best score first (leftmost on ties).
  struct Sym {
    size_t start;
    size_t len;
    int32_t prev;
    int32_t next;
  };
  std::vector<Sym> syms;
  for (size_t pos = 0; pos < text.size();) {
    const size_t len =
        std::min(unicode::utf8_seq_len(static_cast<uint8_t>(text[pos])), text.size() - pos);
    syms.push_back(Sym{pos, len, static_cast<int32_t>(syms.size()) - 1,
                       pos + len < text.size() ? static_cast<int32_t>(syms.size()) + 1 : -1});
    pos += len;
  }
  struct Cand {
    float score;
    int32_t left;
    int32_t right;
    size_t len;
    bool operator<(const Cand& o) const {
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Cand> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Sym& l = syms[static_cast<size_t>(left)];
    const Sym& r = syms[static_cast<size_t>(right)];
    auto it = token_to_id.find(std::string_view(text).substr(l.start, l.len + r.len));
    if (it == token_to_id.end()) return;
    const float score = spec.scores.empty() ? 0.0f : spec.scores[static_cast<size_t>(it->second)];
    queue.push(Cand{score, left, right, l.len + r.len});
  };
  for (size_t i = 1; i < syms.size(); ++i) {
    try_add(static_cast<int32_t>(i) - 1, static_cast<int32_t>(i));
  }
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    Sym& l = syms[static_cast<size_t>(c.left)];
    Sym& r = syms[static_cast<size_t>(c.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != c.len) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.left;
    try_add(l.prev, c.left);
    try_add(c.left, l.next);
  }
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    const Sym& s = syms[static_cast<size_t>(i)];
    const std::string_view piece = std::string_view(text).substr(s.start, s.len);
    auto it = token_to_id.find(piece);
    if (it != token_to_id.end()) {
      out.push_back(it->second);
      continue;
    }
    for (unsigned char b : piece) {  // byte fallback
      const int32_t id = byte_token[b];
      if (id >= 0) {
        out.push_back(id);
      } else if (spec.unk_id >= 0) {
        out.push_back(spec.unk_id);
      }
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  return encode(text, add_bos, parse_special, {});
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special,
                                       std::span<const TextSpan> literal) const {
  for (size_t i = 0; i < literal.size(); ++i) {
    CHECK(literal[i].begin <= literal[i].end && literal[i].end <= text.size());
    CHECK(i == 0 || literal[i - 1].end <= literal[i].begin);
  }
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && m.spec.add_bos && m.spec.bos_id >= 0) out.push_back(m.spec.bos_id);
  const std::vector<Fragment> frags = m.partition(text, parse_special, literal);
  bool prev_special = true;  // spm: the space prefix goes on the first text fragment
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    const std::string_view piece = text.substr(f.begin, f.end - f.begin);
    if (m.spec.kind == TokenizerKind::byte_bpe) {
      m.encode_bpe_fragment(piece, out);
    } else {
      std::string escaped;
      escaped.reserve(piece.size() + 8);
      if (m.spec.add_space_prefix && prev_special) escaped += kSpmSpace;
      for (char c : piece) {
        if (c == ' ') {
          escaped += kSpmSpace;
        } else {
          escaped += c;
        }
      }
      m.encode_spm_fragment(escaped, out);
    }
    prev_special = false;
  }
  return out;
}

std::string Tokenizer::token_to_bytes(int32_t id, bool render_special) const {
  const Impl& m = *impl_;
  if (id < 0 || id >= vocab_size()) return {};
  const auto i = static_cast<size_t>(id);
  switch (m.type(id)) {
    case TokenType::control:
      return render_special ? m.spec.tokens[i] : std::string();
    case TokenType::user_defined:
      return m.spec.tokens[i];
    case TokenType::unknown:
      return render_special ? m.spec.tokens[i] : std::string("\xEF\xBF\xBD");
    case TokenType::unused:
      return {};
    default:
      return m.token_bytes[i];
  }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  bool strip_space = impl_->spec.kind == TokenizerKind::spm && impl_->spec.add_space_prefix;
  for (int32_t id : ids) {
    std::string piece = token_to_bytes(id, render_special);
    if (strip_space && !is_control(id)) {
      // spm: the space the encoder put in front of the text is not part of it.
      if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
      strip_space = false;
    }
    out += piece;
  }
  return out;
}

int32_t Tokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->spec.tokens.size());
}
size_t Tokenizer::max_token_bytes() const {
  return impl_->max_token_bytes;
}
int32_t Tokenizer::bos_id() const {
  return impl_->spec.bos_id;
}
int32_t Tokenizer::eos_id() const {
  return impl_->spec.eos_id;
}

bool Tokenizer::is_eog(int32_t id) const {
  if (id < 0) return false;
  if (id == impl_->spec.eos_id) return true;
  const auto& e = impl_->spec.eot_ids;
  return std::find(e.begin(), e.end(), id) != e.end();
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->type(id) == TokenType::control;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view piece) const {
  auto it = impl_->token_to_id.find(piece);
  if (it == impl_->token_to_id.end()) return std::nullopt;
  return it->second;
}

const TokenizerSpec& Tokenizer::spec() const {
  return impl_->spec;
}

}  // namespace infercept
