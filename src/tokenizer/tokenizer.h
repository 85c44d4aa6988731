// Tokenizer: text <-> token ids for the vocabularies in use by Llama-family models.
//   - byte-level BPE (GPT-2 style: bytes mapped to printable code points, regex
//     pre-tokenization chosen by the `pre` name: gpt2, llama3, smollm, qwen2, ...)
//   - SentencePiece-style BPE over scores (Llama 2: "▁" for spaces, byte fallback <0xNN>)
// Built from a TokenizerSpec, which comes from GGUF metadata (tokenizer_from_gguf) or a
// Hugging Face tokenizer.json (tokenizer_from_hf_json).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/result.h"
#include "tokenizer/text_span.h"

namespace infercept {

class GgufFile;

enum class TokenizerKind { byte_bpe, spm };

// Token types as GGUF numbers them.
enum class TokenType : int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

struct TokenizerSpec {
  TokenizerKind kind = TokenizerKind::byte_bpe;
  std::string pre = "gpt2";         // pre-tokenizer name (byte_bpe only)
  std::vector<std::string> tokens;  // id -> piece (as stored: GPT-2 byte chars / "▁" form)
  std::vector<float> scores;        // spm merge priorities (may be empty for byte_bpe)
  std::vector<TokenType> types;     // may be empty: then all normal
  std::vector<std::string> merges;  // "a b" pairs in rank order (byte_bpe)
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  std::vector<int32_t> eot_ids;  // extra end-of-turn ids (e.g. <|eot_id|>, <|im_end|>)
  bool add_bos = false;
  bool add_space_prefix = false;  // spm: prepend "▁" to the text
  std::string chat_template;      // Jinja source as shipped (may be empty)
};

Result<TokenizerSpec> tokenizer_spec_from_gguf(const GgufFile& gguf);
// `tokenizer_json` is tokenizer.json's text; `tokenizer_config_json` may be empty (it gives
// the chat template and bos/eos settings when present).
Result<TokenizerSpec> tokenizer_spec_from_hf_json(const std::string& tokenizer_json,
                                                  const std::string& tokenizer_config_json,
                                                  const std::string& path);

class Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> create(TokenizerSpec spec);
  ~Tokenizer();

  // Encodes text. With parse_special, substrings equal to control/user-defined tokens
  // ("<|im_start|>") become those tokens; otherwise they are encoded as plain text.
  // add_bos prepends BOS when the vocabulary asks for it (spec.add_bos).
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
  // As above, but control tokens are matched only outside the `literal` byte ranges (sorted,
  // not overlapping, within text): inside them the text is encoded as with parse_special off.
  // This is how a chat prompt is encoded, its client text in `literal`. Outside them nothing
  // changes, so when no literal range holds a special token's text the ids are exactly
  // encode(text, add_bos, parse_special)'s.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special,
                              std::span<const TextSpan> literal) const;

  // The bytes of one token (GPT-2 byte chars and "▁" undone, <0xNN> to the byte). Control
  // tokens give their text only when render_special is set.
  std::string token_to_bytes(int32_t id, bool render_special = false) const;
  // spm with add_space_prefix: the leading space the encoder added is removed, so
  // decode(encode(s)) == s (StreamingDetokenizer keeps it: generated text continues a prompt).
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  int32_t vocab_size() const;
  // The most bytes of text one token stands for (special tokens: their text). A text longer
  // than n * max_token_bytes() encodes to more than n tokens.
  size_t max_token_bytes() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  bool is_eog(int32_t id) const;  // eos or any end-of-turn token
  bool is_control(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view piece) const;
  const TokenizerSpec& spec() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Streaming detokenizer: feed token ids one by one, get text that is always whole UTF-8.
// Bytes of an incomplete character are held back until the rest arrives (or flush()).
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tok, bool render_special = false);
  // Returns the newly completed text (possibly empty).
  std::string push(int32_t id);
  // Returns whatever is held back, invalid sequences replaced by U+FFFD.
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool render_special_;
  std::string pending_;
};

}  // namespace infercept
