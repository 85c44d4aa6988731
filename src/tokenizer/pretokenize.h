// Pre-tokenizers for byte-level BPE: split text into words before BPE merges run, the way
// each model family's regex does, with hand-written scanners instead of a regex engine.
//   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   smollm: every \p{N} code point on its own first, then gpt2 on the text in between
//           (SmolLM / StarCoder: HF's Digits(individual_digits) + ByteLevel)
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2:  as llama3 but \p{N} one code point at a time
// A split's end is treated as the end of text (lookaheads see nothing past it), as in
// llama.cpp, whose token ids the golden tests compare against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace infercept {

enum class PreTokenizer { gpt2, smollm, llama3, qwen2 };

// Maps a GGUF tokenizer.ggml.pre name (or an alias) to a pre-tokenizer; nullopt if unknown.
std::optional<PreTokenizer> pre_tokenizer_from_name(std::string_view name);

// Splits cpts[0, n) into words; appends [begin, end) code point index pairs to `words`.
void pre_tokenize(PreTokenizer kind, const uint32_t* cpts, size_t n,
                  std::vector<std::pair<size_t, size_t>>& words);

}  // namespace infercept
