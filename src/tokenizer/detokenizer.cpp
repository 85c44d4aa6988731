// StreamingDetokenizer: a token can end in the middle of a UTF-8 character (byte-level BPE
// splits rare characters and emoji into byte tokens), so bytes of an incomplete trailing
// character are held back until the rest arrives. Anything that can never become valid is
// replaced with U+FFFD, so the output is always valid UTF-8.
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace infercept {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tok, bool render_special)
    : tok_(tok), render_special_(render_special) {}

std::string StreamingDetokenizer::push(int32_t id) {
  pending_ += tok_.token_to_bytes(id, render_special_);
  const size_t whole = unicode::complete_utf8_prefix(pending_);
  if (whole == 0) return {};
  std::string out = unicode::sanitize_utf8(std::string_view(pending_).substr(0, whole));
  pending_.erase(0, whole);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out = unicode::sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace infercept
