// Hugging Face tokenizer files (tokenizer.json, tokenizer_config.json) from a TokenizerSpec,
// and a small byte-level vocabulary for models whose vocabulary is too small for a given
// tokenizer. What is written reads back through tokenizer_spec_from_hf_json into the same
// tokenization, and loads in Hugging Face `tokenizers` / `transformers` (BPE model, ByteLevel
// pre-tokenizer and decoder, added tokens for control and user-defined tokens).
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"
#include "tokenizer/tokenizer.h"

namespace infercept {

// tokenizer.json for a byte-level BPE spec whose pre-tokenizer is gpt2, smollm, llama3 or
// qwen2. Errors: a SentencePiece spec, another pre-tokenizer, duplicate or empty pieces.
Result<std::string> hf_tokenizer_json(const TokenizerSpec& spec);

// tokenizer_config.json: bos/eos/pad/unk tokens, add_bos_token, the chat template, the
// added tokens, model_max_length.
Result<std::string> hf_tokenizer_config_json(const TokenizerSpec& spec, int64_t model_max_length);

// A byte-level BPE vocabulary of at most `max_vocab` tokens: the control and user-defined
// tokens of `base` (without a base: <|endoftext|>, <|im_start|>, <|im_end|> and a ChatML
// template), the 256 byte tokens, then `base`'s merges in rank order while they fit, at most
// `max_merges` of them (negative: no limit; 0: bytes only). A prefix of a BPE's merges is a
// BPE of its own, so text tokenizes as the base would with its later merges removed. The
// pre-tokenizer, special tokens, BOS setting and chat template follow the base.
Result<TokenizerSpec> byte_level_tokenizer_spec(const TokenizerSpec* base, int64_t max_vocab,
                                                int64_t max_merges = -1);

}  // namespace infercept
