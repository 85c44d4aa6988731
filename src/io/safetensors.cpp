// safetensors and Hugging Face checkpoint reader. A .safetensors file is a u64 little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets: [begin, end)}} with
// offsets relative to the byte after the header, then the data. All of it is untrusted:
// JSON is parsed without exceptions and every field's type is checked before use, every
// offset against the data section and every size against shape * element size. Tensor data
// is not guaranteed to be aligned beyond what the writer chose (usually 8 bytes).
#include "io/safetensors.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "io/model_validate.h"

namespace infercept {

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit
constexpr size_t kMaxDims = 8;

std::string n2s(uint64_t v) {
  return std::to_string(v);
}

// Element size of a safetensors dtype we load; 0 if unsupported.
size_t elem_size(const std::string& dtype, DType* out) {
  if (dtype == "F32") {
    *out = DType::f32;
    return 4;
  }
  if (dtype == "F16") {
    *out = DType::f16;
    return 2;
  }
  if (dtype == "BF16") {
    *out = DType::bf16;
    return 2;
  }
  return 0;
}

// An unsigned integer JSON value as uint64, or nullopt (negative, float, other type).
std::optional<uint64_t> as_u64(const json& v) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    return std::nullopt;
  return v.get<uint64_t>();
}

Result<std::map<std::string, TensorInfo>> parse_safetensors_impl(const uint8_t* data, size_t size,
                                                                 const std::string& path) {
  if (size < 8) return make_error(path, ": truncated safetensors file (", n2s(size), " bytes)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);
  if (header_len > size - 8)
    return make_error(path, ": header length ", n2s(header_len), " exceeds the file (", n2s(size),
                      " bytes)");
  if (header_len > kMaxHeaderBytes)
    return make_error(path, ": header length ", n2s(header_len), " is over the 100 MB limit");
  const char* hb = reinterpret_cast<const char*>(data + 8);
  const json header = json::parse(hb, hb + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return make_error(path, ": header is not valid JSON");
  if (!header.is_object()) return make_error(path, ": header is not a JSON object");

  const uint64_t data_begin = 8 + header_len;
  const uint64_t data_size = size - data_begin;
  std::map<std::string, TensorInfo> out;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string tw = "tensor '" + name + "'";
    if (!v.is_object()) return make_error(path, ": ", tw, " entry is not an object");
    const auto dt = v.find("dtype");
    const auto sh = v.find("shape");
    const auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string())
      return make_error(path, ": ", tw, " has no string 'dtype'");
    if (sh == v.end() || !sh->is_array())
      return make_error(path, ": ", tw, " has no array 'shape'");
    if (off == v.end() || !off->is_array() || off->size() != 2)
      return make_error(path, ": ", tw, " has no 'data_offsets' [begin, end]");
    TensorInfo t;
    t.name = name;
    t.file = path;
    const size_t es = elem_size(dt->get_ref<const std::string&>(), &t.dtype);
    if (es == 0)
      return make_error(path, ": ", tw, " has unsupported dtype '",
                        dt->get_ref<const std::string&>(), "' (supported: F32, F16, BF16)");
    if (sh->size() > kMaxDims)
      return make_error(path, ": ", tw, " has ", n2s(sh->size()), " dimensions (max ",
                        n2s(kMaxDims), ")");
    // The product of the non-zero dims must fit, so that any partial product of the shape
    // (in whatever order a consumer multiplies) fits too.
    uint64_t nonzero_product = 1;
    bool has_zero = false;
    for (const json& d : *sh) {
      const std::optional<uint64_t> dim = as_u64(d);
      if (!dim || *dim > (uint64_t)std::numeric_limits<int64_t>::max())
        return make_error(path, ": ", tw, " has a shape entry that is not a valid dimension");
      if (*dim != 0 && (__builtin_mul_overflow(nonzero_product, *dim, &nonzero_product) ||
                        nonzero_product > (uint64_t)std::numeric_limits<int64_t>::max()))
        return make_error(path, ": ", tw, " has an absurd shape (element count overflows)");
      has_zero = has_zero || *dim == 0;
      t.shape.push_back((int64_t)*dim);
    }
    const uint64_t n = has_zero ? 0 : nonzero_product;
    const std::optional<uint64_t> begin = as_u64((*off)[0]);
    const std::optional<uint64_t> end = as_u64((*off)[1]);
    if (!begin || !end)
      return make_error(path, ": ", tw, " has data_offsets that are not unsigned integers");
    if (*begin > *end || *end > data_size)
      return make_error(path, ": ", tw, " data_offsets [", n2s(*begin), ", ", n2s(*end),
                        ") lie outside the data section (", n2s(data_size), " bytes)");
    uint64_t n_bytes = 0;
    if (__builtin_mul_overflow(n, (uint64_t)es, &n_bytes) || n_bytes != *end - *begin)
      return make_error(path, ": ", tw, " has ", n2s(*end - *begin), " bytes of data but shape ",
                        shape_to_string(t.shape), " of ", dt->get_ref<const std::string&>(),
                        " needs ", n2s(n * es));
    t.data = data + data_begin + *begin;
    t.n_bytes = (size_t)n_bytes;
    out.emplace(name, std::move(t));
  }
  return out;
}

// Optional typed fields of a JSON object; an absent or null field gives the default, a
// field of the wrong type an Error naming it.
struct Fields {
  const json& obj;
  const std::string& path;

  const json* find(const char* key) const {
    auto it = obj.find(key);
    return (it == obj.end() || it->is_null()) ? nullptr : &*it;
  }
  Result<int64_t> integer(const char* key, std::optional<int64_t> def) const {
    const json* v = find(key);
    if (v == nullptr) {
      if (def) return *def;
      return make_error(path, ": missing '", key, "'");
    }
    if (!v->is_number_integer()) return make_error(path, ": '", key, "' is not an integer");
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > (uint64_t)std::numeric_limits<int64_t>::max())
      return make_error(path, ": '", key, "' is out of range");
    return v->get<int64_t>();
  }
  Result<double> number(const char* key, double def) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_number()) return make_error(path, ": '", key, "' is not a number");
    return v->get<double>();
  }
  Result<bool> boolean(const char* key, bool def) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_boolean()) return make_error(path, ": '", key, "' is not a boolean");
    return v->get<bool>();
  }
};

// The architecture a config.json names: 'model_type' (what transformers dispatches on),
// checked against the class in 'architectures' when both are there; an older file with the
// class alone is read by the class. Anything else is an error naming it and what is supported.
Result<std::string> hf_architecture(const Fields& f, const std::string& path) {
  static const std::pair<const char*, const char*> kKnown[] = {
      {"llama", "LlamaForCausalLM"},
      {"mistral", "MistralForCausalLM"},
      {"qwen2", "Qwen2ForCausalLM"},
      {"qwen3", "Qwen3ForCausalLM"},
  };
  std::string supported;
  for (const auto& [type, cls] : kKnown)
    supported += std::string(supported.empty() ? "" : ", ") + type + " (" + cls + ")";
  const json* mt = f.find("model_type");
  if (mt != nullptr && !mt->is_string()) return make_error(path, ": 'model_type' is not a string");
  const json* archs = f.find("architectures");
  std::string cls;
  if (archs != nullptr) {
    if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string())
      return make_error(path, ": 'architectures' is not a list naming the model class");
    cls = (*archs)[0].get<std::string>();
  }
  if (mt == nullptr && cls.empty())
    return make_error(path, ": neither 'model_type' nor 'architectures' names the model");
  for (const auto& [type, c] : kKnown) {
    const bool type_matches = mt != nullptr && mt->get<std::string>() == type;
    const bool class_matches = cls == c;
    if (type_matches && !cls.empty() && !class_matches)
      return make_error(path, ": model class '", cls, "' is not supported for model_type '", type,
                        "' (only ", c, ": a causal language model)");
    if (type_matches || (mt == nullptr && class_matches)) return std::string(type);
  }
  return make_error(
      path, ": unsupported architecture '", mt != nullptr ? mt->get<std::string>() : cls, "'",
      mt != nullptr && !cls.empty() ? " (" + cls + ")" : std::string(), "; supported: ", supported);
}

Result<ModelConfig> parse_hf_config_impl(const std::string& json_text, const std::string& path) {
  const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(path, ": not valid JSON");
  if (!j.is_object()) return make_error(path, ": not a JSON object");
  const Fields f{j, path};

  ModelConfig c;
  TRY_ASSIGN(c.arch, hf_architecture(f, path));
  if (const json* n = f.find("_name_or_path"); n != nullptr && n->is_string())
    c.name = n->get<std::string>();

  TRY_ASSIGN(c.d_model, f.integer("hidden_size", std::nullopt));
  TRY_ASSIGN(c.d_ff, f.integer("intermediate_size", std::nullopt));
  TRY_ASSIGN(c.n_layers, f.integer("num_hidden_layers", std::nullopt));
  TRY_ASSIGN(c.n_heads, f.integer("num_attention_heads", std::nullopt));
  TRY_ASSIGN(c.n_kv_heads, f.integer("num_key_value_heads", c.n_heads));
  if (c.n_heads <= 0) return make_error(path, ": 'num_attention_heads' must be positive");
  TRY_ASSIGN(c.head_dim, f.integer("head_dim", c.d_model / c.n_heads));
  TRY_ASSIGN(c.vocab_size, f.integer("vocab_size", std::nullopt));
  TRY_ASSIGN(c.max_context, f.integer("max_position_embeddings", 2048));
  TRY_ASSIGN(const double eps, f.number("rms_norm_eps", 1e-6));
  TRY_ASSIGN(const double theta, f.number("rope_theta", 10000.0));
  c.rms_eps = (float)eps;
  c.rope_theta = (float)theta;
  TRY_ASSIGN(c.tied_embeddings, f.boolean("tie_word_embeddings", false));
  if (const json* act = f.find("hidden_act");
      act != nullptr && !(act->is_string() && act->get<std::string>() == "silu"))
    return make_error(path, ": 'hidden_act' ", act->dump(), " is not supported (supported: silu)");
  TRY_ASSIGN(const bool attention_bias, f.boolean("attention_bias", false));
  TRY_ASSIGN(const bool mlp_bias, f.boolean("mlp_bias", false));
  if (mlp_bias) return make_error(path, ": 'mlp_bias' = true is not supported");
  // Qwen2 always has q/k/v biases and none on o_proj. Elsewhere attention_bias puts a bias
  // on all four, and the output projection takes none here: refuse rather than drop it.
  if (attention_bias && c.arch != "qwen2")
    return make_error(path, ": 'attention_bias' = true (a bias on o_proj too) is not supported");
  c.qkv_bias = c.arch == "qwen2";
  c.qk_norm = c.arch == "qwen3";
  c.rope_style = RopeStyle::neox;  // HF checkpoints: no Q/K permutation is applied

  // Newer transformers write the RoPE settings as one 'rope_parameters' object (theta and
  // scaling together); older ones as 'rope_theta' and 'rope_scaling'.
  const json* rs = f.find("rope_scaling");
  if (const json* rp = f.find("rope_parameters")) {
    if (!rp->is_object()) return make_error(path, ": 'rope_parameters' is not an object");
    const Fields pf{*rp, path};
    TRY_ASSIGN(const double t, pf.number("rope_theta", c.rope_theta));
    c.rope_theta = (float)t;
    if (rs == nullptr) rs = rp;
  }
  if (rs != nullptr) {
    if (!rs->is_object()) return make_error(path, ": 'rope_scaling' is not an object");
    const Fields rf{*rs, path};
    const json* type = rf.find("rope_type");
    if (type == nullptr) type = rf.find("type");
    if (type == nullptr || !type->is_string())
      return make_error(path, ": 'rope_scaling' has no string 'rope_type'");
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "llama3") {
      c.rope_scaling.type = "llama3";
      TRY_ASSIGN(const double factor, rf.number("factor", 1.0));
      TRY_ASSIGN(const double lo, rf.number("low_freq_factor", 1.0));
      TRY_ASSIGN(const double hi, rf.number("high_freq_factor", 4.0));
      TRY_ASSIGN(c.rope_scaling.original_max_position,
                 rf.integer("original_max_position_embeddings", 8192));
      c.rope_scaling.factor = (float)factor;
      c.rope_scaling.low_freq_factor = (float)lo;
      c.rope_scaling.high_freq_factor = (float)hi;
    } else if (t != "default") {
      return make_error(path, ": rope_scaling type '", t,
                        "' is not supported (supported: default, llama3)");
    }
  }

  // Sliding-window attention: Mistral declares 'sliding_window' (null when off); Qwen2/3
  // only use theirs with 'use_sliding_window' (and then on some layers, 'layer_types' or
  // 'max_window_layers'). Within the window full attention is exact: cap the context to it.
  TRY_ASSIGN(const bool use_sw, f.boolean("use_sliding_window", c.arch == "mistral"));
  bool sliding = use_sw;
  if (const json* lt = f.find("layer_types")) {
    if (!lt->is_array()) return make_error(path, ": 'layer_types' is not a list");
    sliding = false;
    for (const json& t : *lt) {
      if (!t.is_string()) return make_error(path, ": 'layer_types' holds a non-string");
      const std::string& s = t.get_ref<const std::string&>();
      if (s == "sliding_attention")
        sliding = true;
      else if (s != "full_attention")
        return make_error(path, ": layer type '", s,
                          "' is not supported (supported: full_attention, sliding_attention)");
    }
  }
  if (sliding) {
    TRY_ASSIGN(const int64_t window, f.integer("sliding_window", int64_t{0}));
    if (window < 0) return make_error(path, ": 'sliding_window' must not be negative");
    c.apply_sliding_window(window);
  }
  auto valid = c.validate();
  if (!valid.ok()) return make_error(path, ": ", valid.error().message);
  return c;
}

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return make_error("error reading '", path, "'");
  return ss.str();
}

// Shard file names come from the index: keep them inside the checkpoint directory.
bool safe_relative_name(const std::string& name) {
  if (name.empty() || name[0] == '/') return false;
  for (const auto& part : std::filesystem::path(name))
    if (part == "..") return false;
  return true;
}

}  // namespace

Result<std::map<std::string, TensorInfo>> parse_safetensors(const uint8_t* data, size_t size,
                                                            const std::string& path) {
  try {
    return parse_safetensors_impl(data, size, path);
  } catch (const std::exception& e) {  // belt and braces: the code above avoids throwing
    return make_error(path, ": ", e.what());
  }
}

Result<ModelConfig> parse_hf_config(const std::string& json_text, const std::string& path) {
  try {
    return parse_hf_config_impl(json_text, path);
  } catch (const std::exception& e) {
    return make_error(path, ": ", e.what());
  }
}

std::string hf_to_canonical_name(const std::string& hf_name) {
  if (hf_name == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf_name == "model.norm.weight") return "output_norm.weight";
  if (hf_name == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  if (hf_name.compare(0, prefix.size(), prefix) != 0) return "";
  size_t i = prefix.size();
  const size_t digits = i;
  while (i < hf_name.size() && hf_name[i] >= '0' && hf_name[i] <= '9') ++i;
  if (i == digits || i - digits > 6 || i >= hf_name.size() || hf_name[i] != '.') return "";
  const std::string layer = hf_name.substr(digits, i - digits);
  if (layer.size() > 1 && layer[0] == '0') return "";
  const std::string rest = hf_name.substr(i + 1);
  static const std::map<std::string, std::string> kMap = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.bias", "attn_output.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  auto it = kMap.find(rest);
  if (it == kMap.end()) return "";
  return "blk." + layer + "." + it->second;
}

const TensorInfo* HfCheckpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<std::unique_ptr<HfCheckpoint>> HfCheckpoint::open(const std::string& dir) {
  namespace fs = std::filesystem;
  std::unique_ptr<HfCheckpoint> ck(new HfCheckpoint());
  ck->dir_ = dir;
  const std::string config_path = dir + "/config.json";
  std::error_code ec;
  if (!fs::is_regular_file(config_path, ec))
    return make_error(dir, ": no config.json (not a Hugging Face checkpoint directory)");
  TRY_ASSIGN(const std::string config_text, read_text_file(config_path));
  TRY_ASSIGN(ck->config_, parse_hf_config(config_text, config_path));
  if (ck->config_.name.empty()) ck->config_.name = fs::path(dir).filename().string();

  // Shard file -> tensors the index promises it holds (empty list for a single file).
  std::map<std::string, std::vector<std::string>> shards;
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (fs::is_regular_file(index_path, ec)) {
    TRY_ASSIGN(const std::string text, read_text_file(index_path));
    try {
      const json idx = json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (idx.is_discarded() || !idx.is_object())
        return make_error(index_path, ": not a valid JSON object");
      const auto wm = idx.find("weight_map");
      if (wm == idx.end() || !wm->is_object())
        return make_error(index_path, ": missing object 'weight_map'");
      for (const auto& [name, file] : wm->items()) {
        if (!file.is_string() || !safe_relative_name(file.get<std::string>()))
          return make_error(index_path, ": tensor '", name, "' maps to an invalid file name");
        shards[file.get<std::string>()].push_back(name);
      }
    } catch (const std::exception& e) {
      return make_error(index_path, ": ", e.what());
    }
    if (shards.empty()) return make_error(index_path, ": 'weight_map' is empty");
  } else if (fs::is_regular_file(dir + "/model.safetensors", ec)) {
    shards["model.safetensors"] = {};
  } else {
    return make_error(dir, ": neither model.safetensors nor model.safetensors.index.json found");
  }

  bool has_lm_head = false;
  for (const auto& [file, listed] : shards) {
    const std::string fpath = dir + "/" + file;
    TRY_ASSIGN(std::shared_ptr<MappedFile> mf, MappedFile::open(fpath));
    using TensorMap = std::map<std::string, TensorInfo>;
    TRY_ASSIGN(TensorMap ts, parse_safetensors(mf->data(), mf->size(), fpath));
    ck->files_.push_back(std::move(mf));
    for (const std::string& name : listed)
      if (ts.count(name) == 0)
        return make_error(fpath, ": tensor '", name,
                          "' is listed for this shard in model.safetensors.index.json but is "
                          "missing from it");
    for (auto& [hf_name, t] : ts) {
      const std::string canon = hf_to_canonical_name(hf_name);
      if (canon.empty()) continue;
      if (canon == "output.weight") has_lm_head = true;
      if (ck->tensors_.count(canon) != 0)
        return make_error(fpath, ": tensor '", hf_name, "' appears in more than one shard");
      t.name = canon;
      ck->tensors_.emplace(canon, std::move(t));
    }
  }
  ck->config_.tied_embeddings = ck->config_.tied_embeddings || !has_lm_head;
  TRY(validate_llama_tensors(*ck));
  return ck;
}

}  // namespace infercept
