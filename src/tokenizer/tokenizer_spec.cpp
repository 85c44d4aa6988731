// TokenizerSpec from a GGUF's tokenizer.* metadata or from Hugging Face's tokenizer.json
// (+ tokenizer_config.json). Everything here comes from files, so every problem is an Error
// naming the file and the key.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace infercept {
namespace {

// End-of-turn tokens by name: generation stops on these when they are control tokens.
constexpr const char* kEotNames[] = {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>",
                                     "</s>",       "<|eom_id|>", "<end_of_turn>"};

void add_named_eots(TokenizerSpec& spec) {
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    const TokenType ty = spec.types.empty() ? TokenType::normal : spec.types[i];
    if (ty != TokenType::control) continue;
    for (const char* name : kEotNames) {
      const auto id = static_cast<int32_t>(i);
      if (spec.tokens[i] == name && id != spec.eos_id &&
          std::find(spec.eot_ids.begin(), spec.eot_ids.end(), id) == spec.eot_ids.end()) {
        spec.eot_ids.push_back(id);
      }
    }
  }
}

}  // namespace

Result<TokenizerSpec> tokenizer_spec_from_gguf(const GgufFile& gguf) {
  const std::string& path = gguf.path();
  auto err = [&](const std::string& msg) { return make_error(path, ": ", msg); };
  TokenizerSpec spec;
  const auto model = gguf.get_string("tokenizer.ggml.model");
  if (!model) return err("missing string key tokenizer.ggml.model");
  if (*model == "gpt2") {
    spec.kind = TokenizerKind::byte_bpe;
  } else if (*model == "llama") {
    spec.kind = TokenizerKind::spm;
  } else {
    return err("unsupported tokenizer.ggml.model '" + *model +
               "' (supported: gpt2 = byte-level BPE, llama = SentencePiece BPE)");
  }
  spec.pre = gguf.get_string("tokenizer.ggml.pre").value_or("default");
  const auto* tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) return err("missing or empty tokenizer.ggml.tokens");
  spec.tokens = *tokens;
  const size_t n = spec.tokens.size();
  if (const auto* scores = gguf.get_float_array("tokenizer.ggml.scores")) {
    if (scores->size() != n) return err("tokenizer.ggml.scores has a different length than tokens");
    spec.scores.assign(scores->begin(), scores->end());
  } else if (spec.kind == TokenizerKind::spm) {
    return err("missing tokenizer.ggml.scores (needed by a llama/SentencePiece vocabulary)");
  }
  if (const auto* types = gguf.get_int_array("tokenizer.ggml.token_type")) {
    if (types->size() != n) {
      return err("tokenizer.ggml.token_type has a different length than tokens");
    }
    spec.types.reserve(n);
    for (int64_t t : *types) {
      if (t < 0 || t > 6)
        return err("tokenizer.ggml.token_type has unknown type " + std::to_string(t));
      spec.types.push_back(static_cast<TokenType>(t));
    }
  }
  if (spec.kind == TokenizerKind::byte_bpe) {
    const auto* merges = gguf.get_string_array("tokenizer.ggml.merges");
    if (!merges) return err("missing tokenizer.ggml.merges (needed by a gpt2/BPE vocabulary)");
    spec.merges = *merges;
  }
  auto id_key = [&](const char* key, int32_t fallback) -> Result<int32_t> {
    const auto v = gguf.get_int(key);
    if (!v) return fallback;
    if (*v < -1 || *v >= static_cast<int64_t>(n)) {
      return err(std::string(key) + " = " + std::to_string(*v) + " is outside the vocabulary");
    }
    return static_cast<int32_t>(*v);
  };
  const bool spm = spec.kind == TokenizerKind::spm;
  TRY_ASSIGN(spec.bos_id, id_key("tokenizer.ggml.bos_token_id", spm ? 1 : -1));
  TRY_ASSIGN(spec.eos_id, id_key("tokenizer.ggml.eos_token_id", spm ? 2 : -1));
  TRY_ASSIGN(spec.unk_id, id_key("tokenizer.ggml.unknown_token_id", spm ? 0 : -1));
  TRY_ASSIGN(spec.pad_id, id_key("tokenizer.ggml.padding_token_id", -1));
  int32_t eot = -1;
  TRY_ASSIGN(eot, id_key("tokenizer.ggml.eot_token_id", -1));
  if (eot >= 0 && eot != spec.eos_id) spec.eot_ids.push_back(eot);
  spec.add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token").value_or(spm);
  spec.add_space_prefix = gguf.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm);
  spec.chat_template = gguf.get_string("tokenizer.chat_template").value_or("");
  add_named_eots(spec);
  return spec;
}

namespace {

using json = nlohmann::json;

constexpr std::string_view kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// Picks a `pre` name from tokenizer.json's pre_tokenizer, or an Error naming what was found.
Result<std::string> detect_pre(const json& pre, const std::string& path) {
  if (pre.is_null()) return std::string("gpt2");
  const std::string type = pre.value("type", "");
  if (type == "ByteLevel") return std::string("gpt2");
  if (type != "Sequence" || !pre.contains("pretokenizers") || !pre["pretokenizers"].is_array()) {
    return make_error(path, ": unsupported pre_tokenizer type '", type, "'");
  }
  bool digits_individual = false;
  for (const json& p : pre["pretokenizers"]) {
    const std::string t = p.value("type", "");
    if (t == "Digits" && p.value("individual_digits", false)) digits_individual = true;
    if (t == "Split" && p.contains("pattern") && p["pattern"].is_object() &&
        p["pattern"].contains("Regex")) {
      const std::string re = p["pattern"]["Regex"].get<std::string>();
      if (re == kLlama3Pattern) return std::string("llama3");
      if (re == kQwen2Pattern) return std::string("qwen2");
      if (re == kGpt2Pattern) return std::string(digits_individual ? "smollm" : "gpt2");
      return make_error(path, ": unsupported pre-tokenizer Split regex '", re, "'");
    }
  }
  return std::string(digits_individual ? "smollm" : "gpt2");
}

// tokenizer_config.json tokens are a string or {"content": ...}.
std::string token_content(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return {};
}

bool is_spm_style(const json& root) {
  const json& model = root["model"];
  if (model.value("byte_fallback", false)) return true;
  const json& pre = root.contains("pre_tokenizer") ? root["pre_tokenizer"] : json();
  if (pre.is_object() && pre.value("type", "") == "Metaspace") return true;
  const json& norm = root.contains("normalizer") ? root["normalizer"] : json();
  return norm.is_object() && norm.dump().find("\xE2\x96\x81") != std::string::npos;
}

bool has_prepend_space(const json& root) {
  const json& norm = root.contains("normalizer") ? root["normalizer"] : json();
  if (norm.is_object() && norm.dump().find("\"Prepend\"") != std::string::npos) return true;
  const json& pre = root.contains("pre_tokenizer") ? root["pre_tokenizer"] : json();
  if (pre.is_object() && pre.value("type", "") == "Metaspace") {
    if (pre.contains("prepend_scheme")) return pre["prepend_scheme"] != "never";
    return pre.value("add_prefix_space", true);
  }
  return false;
}

}  // namespace

Result<TokenizerSpec> tokenizer_spec_from_hf_json(const std::string& tokenizer_json,
                                                  const std::string& tokenizer_config_json,
                                                  const std::string& path) {
  json root;
  try {
    root = json::parse(tokenizer_json);
  } catch (const json::exception& e) {
    return make_error(path, ": tokenizer.json is not valid JSON: ", e.what());
  }
  try {
    if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) {
      return make_error(path, ": tokenizer.json has no \"model\" object");
    }
    const json& model = root["model"];
    const std::string type = model.value("type", "BPE");
    if (type != "BPE") {
      return make_error(path, ": unsupported tokenizer model type '", type, "' (only BPE)");
    }
    if (!model.contains("vocab") || !model["vocab"].is_object()) {
      return make_error(path, ": model.vocab is missing or not an object");
    }
    TokenizerSpec spec;
    spec.kind = is_spm_style(root) ? TokenizerKind::spm : TokenizerKind::byte_bpe;
    std::map<int64_t, std::pair<std::string, TokenType>> by_id;
    for (const auto& [piece, idv] : model["vocab"].items()) {
      if (!idv.is_number_integer() || idv.get<int64_t>() < 0) {
        return make_error(path, ": model.vocab entry '", piece, "' has no valid id");
      }
      by_id[idv.get<int64_t>()] = {piece, TokenType::normal};
    }
    if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
      for (const json& t : root["added_tokens"]) {
        if (!t.contains("id") || !t.contains("content")) {
          return make_error(path, ": an added_tokens entry lacks id or content");
        }
        const bool special = t.value("special", false);
        by_id[t["id"].get<int64_t>()] = {t["content"].get<std::string>(),
                                         special ? TokenType::control : TokenType::user_defined};
      }
    }
    if (by_id.empty()) return make_error(path, ": the vocabulary is empty");
    const int64_t n = by_id.rbegin()->first + 1;
    if (n > (1 << 24)) return make_error(path, ": token id ", std::to_string(n - 1), " too large");
    spec.tokens.resize(static_cast<size_t>(n));
    spec.types.assign(static_cast<size_t>(n), TokenType::unused);
    for (auto& [id, pt] : by_id) {
      spec.tokens[static_cast<size_t>(id)] = pt.first;
      TokenType ty = pt.second;
      if (spec.kind == TokenizerKind::spm && ty == TokenType::normal && pt.first.size() == 6 &&
          pt.first.rfind("<0x", 0) == 0 && pt.first[5] == '>') {
        ty = TokenType::byte;
      }
      spec.types[static_cast<size_t>(id)] = ty;
    }
    if (model.contains("merges") && model["merges"].is_array()) {
      for (const json& m : model["merges"]) {
        if (m.is_string()) {
          spec.merges.push_back(m.get<std::string>());
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
          spec.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
        } else {
          return make_error(path, ": model.merges entries must be \"a b\" or [\"a\", \"b\"]");
        }
      }
    }
    if (spec.kind == TokenizerKind::byte_bpe) {
      TRY_ASSIGN(spec.pre,
                 detect_pre(root.contains("pre_tokenizer") ? root["pre_tokenizer"] : json(), path));
    } else {
      // SentencePiece BPE merges by token score; a merge's rank gives the same order.
      spec.scores.assign(static_cast<size_t>(n), 0.0f);
      std::vector<bool> seen(static_cast<size_t>(n), false);
      for (size_t r = 0; r < spec.merges.size(); ++r) {
        const std::string& m = spec.merges[r];
        const size_t sp = m.find(' ', 1);
        if (sp == std::string::npos) continue;
        auto it = model["vocab"].find(m.substr(0, sp) + m.substr(sp + 1));
        if (it == model["vocab"].end()) continue;
        const auto id = static_cast<size_t>(it->get<int64_t>());
        if (!seen[id]) spec.scores[id] = -static_cast<float>(r);
        seen[id] = true;
      }
      spec.add_space_prefix = has_prepend_space(root);
      if (model.contains("unk_token") && model["unk_token"].is_string()) {
        auto it = model["vocab"].find(model["unk_token"].get<std::string>());
        if (it != model["vocab"].end()) spec.unk_id = static_cast<int32_t>(it->get<int64_t>());
      }
    }
    auto find_id = [&](const std::string& content) -> int32_t {
      if (content.empty()) return -1;
      for (size_t i = 0; i < spec.tokens.size(); ++i) {
        if (spec.tokens[i] == content) return static_cast<int32_t>(i);
      }
      return -1;
    };
    if (!tokenizer_config_json.empty()) {
      json cfg;
      try {
        cfg = json::parse(tokenizer_config_json);
      } catch (const json::exception& e) {
        return make_error(path, ": tokenizer_config.json is not valid JSON: ", e.what());
      }
      if (cfg.contains("chat_template")) {
        const json& ct = cfg["chat_template"];
        if (ct.is_string()) {
          spec.chat_template = ct.get<std::string>();
        } else if (ct.is_array()) {
          for (const json& e : ct) {
            if (e.value("name", "") == "default") spec.chat_template = e.value("template", "");
          }
        }
      }
      if (cfg.contains("bos_token")) spec.bos_id = find_id(token_content(cfg["bos_token"]));
      if (cfg.contains("eos_token")) spec.eos_id = find_id(token_content(cfg["eos_token"]));
      if (cfg.contains("pad_token")) spec.pad_id = find_id(token_content(cfg["pad_token"]));
      if (cfg.contains("unk_token")) {
        const int32_t u = find_id(token_content(cfg["unk_token"]));
        if (u >= 0) spec.unk_id = u;
      }
      spec.add_bos = cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()
                         ? cfg["add_bos_token"].get<bool>()
                         : (spec.kind == TokenizerKind::spm && spec.bos_id >= 0);
    } else {
      spec.add_bos = spec.kind == TokenizerKind::spm;
      if (spec.kind == TokenizerKind::spm) {
        spec.bos_id = find_id("<s>");
        spec.eos_id = find_id("</s>");
      }
    }
    add_named_eots(spec);
    return spec;
  } catch (const json::exception& e) {
    return make_error(path, ": unexpected tokenizer.json structure: ", e.what());
  }
}

}  // namespace infercept
