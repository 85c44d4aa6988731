// A byte range of a text. The chat renderer marks the ranges that came from the client
// (message content, tool names, arguments and schemas) so the tokenizer encodes them as plain
// text: special tokens in a prompt come only from the template's own structure.
#pragma once

#include <cstddef>

namespace infercept {

struct TextSpan {
  size_t begin = 0;  // first byte
  size_t end = 0;    // one past the last byte

  bool operator==(const TextSpan&) const = default;
};

}  // namespace infercept
