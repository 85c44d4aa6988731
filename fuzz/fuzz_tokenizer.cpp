// libFuzzer target for the tokenizer (the default model's byte-level BPE): any byte string,
// valid UTF-8 or not, encodes with and without special-token parsing into ids inside the
// vocabulary; decoding those ids (and the input read as raw ids, in range or not) and
// streaming them through the detokenizer never crash; valid UTF-8 round-trips.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "default_tokenizer.h"
#include "tokenizer/unicode.h"

using namespace infercept;

namespace {

volatile uint64_t g_sink;

void check_ids(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) std::abort();  // an id outside the vocabulary
  }
}

uint64_t detokenize(const Tokenizer& tok, const std::vector<int32_t>& ids, bool render_special) {
  uint64_t acc = tok.decode(ids, render_special).size();
  StreamingDetokenizer stream(tok, render_special);
  for (int32_t id : ids) {
    acc += stream.push(id).size() + tok.token_to_bytes(id, render_special).size();
    acc += (uint64_t)tok.is_eog(id) + (uint64_t)tok.is_control(id);
  }
  return acc + stream.flush().size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = fuzz::default_tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  uint64_t acc = 0;

  const std::vector<int32_t> plain = tok.encode(text, /*add_bos=*/false, /*parse_special=*/false);
  check_ids(tok, plain);
  acc += detokenize(tok, plain, false);
  // Valid UTF-8 comes back byte for byte when every byte of it has a token (invalid
  // sequences are replaced by U+FFFD on the way in; a byte the vocabulary lacks, such as 0x04
  // in SmolLM2's, is dropped, as llama.cpp does).
  static const std::vector<bool> byte_has_token = [&] {
    std::vector<bool> has(256);
    for (int b = 0; b < 256; ++b) {
      const std::string one(1, static_cast<char>(b));
      has[b] = tok.decode(tok.encode(one, false, false)) == one;
    }
    return has;
  }();
  bool covered = true;
  for (size_t i = 0; i < size && covered; ++i) covered = byte_has_token[data[i]];
  if (covered && unicode::sanitize_utf8(text) == text && tok.decode(plain) != text) std::abort();

  const std::vector<int32_t> special = tok.encode(text, /*add_bos=*/true, /*parse_special=*/true);
  check_ids(tok, special);
  acc += detokenize(tok, special, true);

  // The same bytes as token ids, as a client's prompt_tokens could be: out-of-range ids
  // included.
  std::vector<int32_t> raw(size / sizeof(int32_t));
  if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * sizeof(int32_t));
  acc += detokenize(tok, raw, false) + detokenize(tok, raw, true);
  g_sink = acc;
  return 0;
}
