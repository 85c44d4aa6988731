// Hugging Face tokenizer files from a TokenizerSpec (see hf_export.h). The layouts follow
// what `tokenizers` itself saves for byte-level BPE vocabularies (SmolLM2, Llama 3, Qwen2).
#include "tokenizer/hf_export.h"

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace infercept {

namespace {

using ojson = nlohmann::ordered_json;

// The Split regexes of Llama 3 and Qwen2 tokenizer.json files (tokenizer_spec_from_hf_json
// recognises exactly these strings).
constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

ojson byte_level(bool use_regex) {
  return ojson{{"type", "ByteLevel"},
               {"add_prefix_space", false},
               {"trim_offsets", true},
               {"use_regex", use_regex}};
}

ojson split_then_bytes(const char* pattern) {
  return ojson{{"type", "Sequence"},
               {"pretokenizers",
                {ojson{{"type", "Split"},
                       {"pattern", {{"Regex", pattern}}},
                       {"behavior", "Isolated"},
                       {"invert", false}},
                 byte_level(false)}}};
}

Result<ojson> pre_tokenizer_json(const std::string& name) {
  const auto pre = pre_tokenizer_from_name(name);
  if (!pre) return make_error("cannot write a tokenizer.json for pre-tokenizer '", name, "'");
  switch (*pre) {
    case PreTokenizer::gpt2:
      return byte_level(true);
    case PreTokenizer::smollm:
      return ojson{{"type", "Sequence"},
                   {"pretokenizers",
                    {ojson{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
    case PreTokenizer::llama3:
      return split_then_bytes(kLlama3Pattern);
    case PreTokenizer::qwen2:
      return split_then_bytes(kQwen2Pattern);
  }
  return make_error("unknown pre-tokenizer '", name, "'");
}

TokenType type_of(const TokenizerSpec& s, size_t i) {
  return s.types.empty() ? TokenType::normal : s.types[i];
}

bool is_added(TokenType t) {
  return t == TokenType::control || t == TokenType::user_defined;
}

ojson added_token(const std::string& content, bool special) {
  return ojson{{"content", content}, {"single_word", false},   {"lstrip", false},
               {"rstrip", false},    {"normalized", !special}, {"special", special}};
}

const std::string* piece(const TokenizerSpec& s, int32_t id) {
  if (id < 0 || (size_t)id >= s.tokens.size()) return nullptr;
  return &s.tokens[(size_t)id];
}

// GPT-2's byte -> code point map (printable Latin-1 bytes map to themselves, the other 68 to
// U+0100 onwards in byte order), as UTF-8 strings.
std::vector<std::string> byte_chars() {
  std::vector<std::string> out(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    unicode::append_utf8(out[b], printable ? b : next++);
  }
  return out;
}

Status check_exportable(const TokenizerSpec& spec) {
  if (spec.kind != TokenizerKind::byte_bpe)
    return make_error("only byte-level BPE vocabularies can be written as tokenizer.json here");
  if (!spec.types.empty() && spec.types.size() != spec.tokens.size())
    return make_error("tokenizer spec: types and tokens differ in length");
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    if (spec.tokens[i].empty())
      return make_error("tokenizer spec: token ", std::to_string(i), " is empty");
    auto [it, fresh] = seen.emplace(spec.tokens[i], i);
    if (!fresh)
      return make_error("tokenizer spec: tokens ", std::to_string(it->second), " and ",
                        std::to_string(i), " are both '", spec.tokens[i], "'");
  }
  return ok_status();
}

Result<std::string> hf_tokenizer_json_impl(const TokenizerSpec& spec) {
  TRY(check_exportable(spec));
  TRY_ASSIGN(ojson pre, pre_tokenizer_json(spec.pre));
  ojson root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  ojson added = ojson::array();
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    const TokenType t = type_of(spec, i);
    if (!is_added(t)) continue;
    ojson a = {{"id", (int64_t)i}};
    a.update(added_token(spec.tokens[i], t == TokenType::control));
    added.push_back(std::move(a));
  }
  root["added_tokens"] = std::move(added);
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = std::move(pre);
  const std::string* bos = piece(spec, spec.bos_id);
  if (spec.add_bos && bos != nullptr) {
    // Prepend BOS, as Llama 3's tokenizer.json does.
    const ojson b = {{"SpecialToken", {{"id", *bos}, {"type_id", 0}}}};
    root["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {b, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair",
         {b,
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          b,
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{*bos, {{"id", *bos}, {"ids", {spec.bos_id}}, {"tokens", {*bos}}}}}}};
  } else {
    root["post_processor"] = {{"type", "ByteLevel"},
                              {"add_prefix_space", true},
                              {"trim_offsets", false},
                              {"use_regex", true}};
  }
  root["decoder"] = {{"type", "ByteLevel"},
                     {"add_prefix_space", true},
                     {"trim_offsets", true},
                     {"use_regex", true}};
  ojson model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  if (pre_tokenizer_from_name(spec.pre) == PreTokenizer::llama3) model["ignore_merges"] = true;
  // The vocabulary is spliced in as text: ordered_json finds keys by linear search, which
  // is quadratic over 100k tokens. Ids in increasing order, as tokenizers writes them.
  constexpr const char* kVocabSlot = "@@vocab@@";
  model["vocab"] = kVocabSlot;
  ojson merges = ojson::array();
  for (const std::string& m : spec.merges) merges.push_back(m);
  model["merges"] = std::move(merges);
  root["model"] = std::move(model);
  const auto strict = nlohmann::json::error_handler_t::strict;
  std::string text = root.dump(2, ' ', /*ensure_ascii=*/false, strict);
  std::string vocab = "\"vocab\": {";
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    vocab += i == 0 ? "\n      " : ",\n      ";
    vocab += ojson(spec.tokens[i]).dump(-1, ' ', false, strict);
    vocab += ": " + std::to_string(i);
  }
  vocab += "\n    }";
  const std::string slot = std::string("\"vocab\": \"") + kVocabSlot + "\"";
  const size_t at = text.find(slot);
  if (at == std::string::npos) return make_error("tokenizer.json: vocabulary slot not found");
  text.replace(at, slot.size(), vocab);
  return text + "\n";
}

Result<std::string> hf_tokenizer_config_json_impl(const TokenizerSpec& spec,
                                                  int64_t model_max_length) {
  TRY(check_exportable(spec));
  ojson cfg;
  cfg["add_bos_token"] = spec.add_bos;
  cfg["add_eos_token"] = false;
  ojson decoder = ojson::object();
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    const TokenType t = type_of(spec, i);
    if (is_added(t))
      decoder[std::to_string(i)] = added_token(spec.tokens[i], t == TokenType::control);
  }
  cfg["added_tokens_decoder"] = std::move(decoder);
  auto token_or_null = [&](int32_t id) -> ojson {
    const std::string* p = piece(spec, id);
    return p == nullptr ? ojson(nullptr) : ojson(*p);
  };
  cfg["bos_token"] = token_or_null(spec.bos_id);
  if (!spec.chat_template.empty()) cfg["chat_template"] = spec.chat_template;
  cfg["clean_up_tokenization_spaces"] = false;
  cfg["eos_token"] = token_or_null(spec.eos_id);
  cfg["model_max_length"] = model_max_length;
  cfg["pad_token"] = token_or_null(spec.pad_id);
  cfg["tokenizer_class"] = "PreTrainedTokenizerFast";
  cfg["unk_token"] = token_or_null(spec.unk_id);
  return cfg.dump(2, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::strict) + "\n";
}

}  // namespace

// nlohmann throws on invalid UTF-8 when dumping: a token that is not UTF-8 is an Error.
Result<std::string> hf_tokenizer_json(const TokenizerSpec& spec) {
  try {
    return hf_tokenizer_json_impl(spec);
  } catch (const std::exception& e) {
    return make_error("cannot write tokenizer.json: ", e.what());
  }
}

Result<std::string> hf_tokenizer_config_json(const TokenizerSpec& spec, int64_t model_max_length) {
  try {
    return hf_tokenizer_config_json_impl(spec, model_max_length);
  } catch (const std::exception& e) {
    return make_error("cannot write tokenizer_config.json: ", e.what());
  }
}

Result<TokenizerSpec> byte_level_tokenizer_spec(const TokenizerSpec* base, int64_t max_vocab,
                                                int64_t max_merges) {
  TokenizerSpec out;
  out.kind = TokenizerKind::byte_bpe;
  std::unordered_map<std::string, int32_t> index;
  auto add = [&](const std::string& p, TokenType t) {
    index.emplace(p, (int32_t)out.tokens.size());
    out.tokens.push_back(p);
    out.types.push_back(t);
  };
  // Special token ids of the base, re-found by name in the new vocabulary.
  std::string bos, eos, unk, pad;
  std::vector<std::string> eots;
  if (base != nullptr) {
    if (base->kind != TokenizerKind::byte_bpe)
      return make_error("a byte-level vocabulary can only be cut from a byte-level BPE base");
    out.pre = base->pre;
    out.add_bos = base->add_bos;
    out.chat_template = base->chat_template;
    for (size_t i = 0; i < base->tokens.size(); ++i) {
      const TokenType t = type_of(*base, i);
      if (is_added(t) && !base->tokens[i].empty() && index.count(base->tokens[i]) == 0)
        add(base->tokens[i], t);
    }
    auto name_of = [&](int32_t id) {
      const std::string* p = piece(*base, id);
      return p ? *p : std::string();
    };
    bos = name_of(base->bos_id);
    eos = name_of(base->eos_id);
    unk = name_of(base->unk_id);
    pad = name_of(base->pad_id);
    for (int32_t id : base->eot_ids) eots.push_back(name_of(id));
  } else {
    out.pre = "gpt2";
    out.chat_template = kChatMlTemplate;
    add("<|endoftext|>", TokenType::control);
    add("<|im_start|>", TokenType::control);
    add("<|im_end|>", TokenType::control);
    bos = "<|im_start|>";
    eos = "<|im_end|>";
    pad = "<|im_end|>";
    unk = "<|endoftext|>";
    eots = {"<|endoftext|>"};
  }
  const std::vector<std::string> bytes = byte_chars();
  if (max_vocab < (int64_t)out.tokens.size() + 256)
    return make_error("a vocabulary of ", std::to_string(max_vocab), " tokens cannot hold the ",
                      std::to_string(out.tokens.size()), " special tokens and 256 byte tokens");
  for (const std::string& b : bytes)
    if (index.count(b) == 0) add(b, TokenType::normal);
  if (base != nullptr) {
    for (const std::string& m : base->merges) {
      if (max_merges >= 0 && (int64_t)out.merges.size() >= max_merges) break;
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) continue;
      const std::string left = m.substr(0, sp), right = m.substr(sp + 1);
      // A well-formed BPE builds every part from bytes and earlier merges; a merge whose
      // parts are not there yet could never apply.
      if (index.count(left) == 0 || index.count(right) == 0) continue;
      const std::string merged = left + right;
      if (index.count(merged) == 0) {
        if ((int64_t)out.tokens.size() >= max_vocab) break;
        add(merged, TokenType::normal);
      }
      out.merges.push_back(m);
    }
  }
  auto id_of = [&](const std::string& p) -> int32_t {
    auto it = index.find(p);
    return p.empty() || it == index.end() ? -1 : it->second;
  };
  out.bos_id = id_of(bos);
  out.eos_id = id_of(eos);
  out.unk_id = id_of(unk);
  out.pad_id = id_of(pad);
  for (const std::string& e : eots)
    if (const int32_t id = id_of(e); id >= 0 && id != out.eos_id) out.eot_ids.push_back(id);
  return out;
}

}  // namespace infercept
