// Random-weight Hugging Face Llama checkpoints (see random_checkpoint.h).
#include "engine/random_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/half.h"
#include "io/gguf.h"
#include "tokenizer/hf_export.h"

namespace infercept {

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// splitmix64's output function.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The sum of the four 16-bit parts of a random word, centred and scaled to unit variance:
// Irwin-Hall with n = 4, close enough to a normal for weights (and bounded at +-3.46).
inline float normalish(uint64_t r) {
  const int64_t s = (int64_t)(r & 0xffff) + (int64_t)((r >> 16) & 0xffff) +
                    (int64_t)((r >> 32) & 0xffff) + (int64_t)(r >> 48);
  constexpr float kInvSd = 1.0f / 37837.227f;  // sqrt(4 * (65536^2 - 1) / 12)
  return (float)(s - 131070) * kInvSd;
}

struct TensorGen {
  uint64_t key = 0;
  float mean = 0.0f;
  float std = 0.02f;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TensorGen generator_for(uint64_t seed, const LlamaShape& shape, const std::string& name) {
  TensorGen g;
  g.key = mix64(mix64(seed + kGolden) ^ fnv1a(name));
  if (ends_with(name, "layernorm.weight") || name == "model.norm.weight") {
    g.mean = 1.0f;
    g.std = 0.01f;
  } else if (ends_with(name, "q_norm.weight") || ends_with(name, "k_norm.weight")) {
    g.mean = 1.0f;
    g.std = 0.1f;
  } else if (ends_with(name, ".bias")) {
    g.std = 0.1f;
  } else if (name.find("o_proj") != std::string::npos ||
             name.find("down_proj") != std::string::npos) {
    g.std = (float)(0.02 / std::sqrt(2.0 * (double)std::max<int64_t>(1, shape.n_layers)));
  }
  return g;
}

inline float value_at(const TensorGen& g, int64_t i) {
  return g.mean + g.std * normalish(mix64(g.key + (uint64_t)(i + 1) * kGolden));
}

// bf16 rounding (to nearest even) of a finite float, without fp32_to_bf16's NaN branch so
// that the loop vectorizes; the generator never produces NaN or infinity.
inline uint16_t finite_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Elements [first, first + count) of a tensor, in blocks of a fixed size (the last one
// computed whole and copied in part): fixed trip counts let the generator and conversion
// loops vectorize at -O2.
void fill_range(const TensorGen& g, DType dtype, int64_t first, int64_t count, uint16_t* out) {
  constexpr int kBlock = 512;
  alignas(64) float tmp[kBlock];
  alignas(64) uint16_t half[kBlock];
  for (int64_t b = 0; b < count; b += kBlock) {
    const uint64_t base = g.key + (uint64_t)(first + b + 1) * kGolden;
    for (int j = 0; j < kBlock; ++j)
      tmp[j] = g.mean + g.std * normalish(mix64(base + (uint64_t)j * kGolden));
    uint16_t* o = count - b >= kBlock ? out + b : half;
    if (dtype == DType::bf16) {
      for (int j = 0; j < kBlock; ++j) o[j] = finite_to_bf16(tmp[j]);
    } else {
      for (int j = 0; j < kBlock; ++j) o[j] = fp32_to_fp16(tmp[j]);
    }
    if (o == half) std::memcpy(out + b, half, (size_t)(count - b) * sizeof(uint16_t));
  }
}

LlamaShape make_shape(const char* name, int64_t hidden, int64_t ffn, int64_t layers, int64_t heads,
                      int64_t kv_heads, int64_t vocab, int64_t max_pos, double theta, bool tie) {
  LlamaShape s;
  s.name = name;
  s.hidden_size = hidden;
  s.intermediate_size = ffn;
  s.n_layers = layers;
  s.n_heads = heads;
  s.n_kv_heads = kv_heads;
  s.vocab_size = vocab;
  s.max_position_embeddings = max_pos;
  s.rope_theta = theta;
  s.rms_norm_eps = 1e-5;
  s.tie_word_embeddings = tie;
  return s;
}

// Qwen2/Qwen3 shapes: the architecture and Qwen's RMSNorm epsilon.
LlamaShape qwen(LlamaShape s, const char* arch) {
  s.arch = arch;
  s.rms_norm_eps = 1e-6;
  return s;
}

std::string dtype_torch_name(DType t) {
  return t == DType::bf16 ? "bfloat16" : t == DType::f16 ? "float16" : "float32";
}

}  // namespace

const std::vector<LlamaShape>& llama_shapes() {
  static const std::vector<LlamaShape> shapes = [] {
    std::vector<LlamaShape> v;
    // meta-llama/Llama-2-7b-hf and -13b-hf.
    v.push_back(make_shape("llama2-7b", 4096, 11008, 32, 32, 32, 32000, 4096, 10000.0, false));
    v.push_back(make_shape("llama2-13b", 5120, 13824, 40, 40, 40, 32000, 4096, 10000.0, false));
    // meta-llama/Llama-3.1-8B.
    LlamaShape l3 =
        make_shape("llama3-8b", 4096, 14336, 32, 32, 8, 128256, 131072, 500000.0, false);
    l3.rope_scaling.type = "llama3";
    l3.rope_scaling.factor = 8.0f;
    l3.rope_scaling.low_freq_factor = 1.0f;
    l3.rope_scaling.high_freq_factor = 4.0f;
    l3.rope_scaling.original_max_position = 8192;
    v.push_back(l3);
    // Milliseconds per step on a CPU; the default tokenizer fits exactly. Untied, so that it
    // has the same tensors as the real shapes.
    v.push_back(make_shape("tiny", 256, 768, 4, 8, 4, 49152, 8192, 10000.0, false));
    // Qwen/Qwen2.5-7B-Instruct (q/k/v biases; its sliding window is off).
    v.push_back(
        qwen(make_shape("qwen2.5-7b", 3584, 18944, 28, 28, 4, 152064, 32768, 1e6, false), "qwen2"));
    // Qwen/Qwen3-8B (q/k head norms, head_dim 128).
    LlamaShape q3 =
        qwen(make_shape("qwen3-8b", 4096, 12288, 36, 32, 8, 151936, 40960, 1e6, false), "qwen3");
    q3.explicit_head_dim = 128;
    v.push_back(q3);
    // mistralai/Mistral-7B-Instruct-v0.3 (sliding_window null).
    LlamaShape m7 = make_shape("mistral-7b", 4096, 14336, 32, 32, 8, 32768, 32768, 1e6, false);
    m7.arch = "mistral";
    v.push_back(m7);
    // The tiny shape in each other architecture, with what sets it apart: tied embeddings as
    // the small Qwen2.5/Qwen3 sizes have, Qwen3's head_dim apart from hidden / heads, and a
    // Mistral window shorter than the positions (the context is capped to it).
    v.push_back(qwen(make_shape("qwen2-tiny", 256, 768, 4, 8, 4, 49152, 8192, 1e6, true), "qwen2"));
    LlamaShape q3t =
        qwen(make_shape("qwen3-tiny", 256, 768, 4, 8, 4, 49152, 8192, 1e6, true), "qwen3");
    q3t.explicit_head_dim = 64;
    v.push_back(q3t);
    LlamaShape mt = make_shape("mistral-tiny", 256, 768, 4, 8, 4, 49152, 8192, 1e6, false);
    mt.arch = "mistral";
    mt.sliding_window = 4096;
    v.push_back(mt);
    return v;
  }();
  return shapes;
}

Result<LlamaShape> find_llama_shape(const std::string& name) {
  std::string names;
  for (const LlamaShape& s : llama_shapes()) {
    if (s.name == name) return s;
    names += (names.empty() ? "" : "|") + s.name;
  }
  return make_error("unknown model shape '", name, "' (known: ", names, ")");
}

std::vector<SafetensorsTensor> random_checkpoint_tensors(const LlamaShape& s, DType dtype) {
  const int64_t d = s.hidden_size, f = s.intermediate_size;
  const int64_t q = s.n_heads * s.head_dim(), kv = s.n_kv_heads * s.head_dim();
  std::vector<SafetensorsTensor> t;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    t.push_back(SafetensorsTensor{std::move(name), dtype, std::move(shape)});
  };
  add("model.embed_tokens.weight", {s.vocab_size, d});
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {d});
    add(p + "self_attn.q_proj.weight", {q, d});
    add(p + "self_attn.k_proj.weight", {kv, d});
    add(p + "self_attn.v_proj.weight", {kv, d});
    if (s.arch == "qwen2") {
      add(p + "self_attn.q_proj.bias", {q});
      add(p + "self_attn.k_proj.bias", {kv});
      add(p + "self_attn.v_proj.bias", {kv});
    }
    if (s.arch == "qwen3") {
      add(p + "self_attn.q_norm.weight", {s.head_dim()});
      add(p + "self_attn.k_norm.weight", {s.head_dim()});
    }
    add(p + "self_attn.o_proj.weight", {d, q});
    add(p + "post_attention_layernorm.weight", {d});
    add(p + "mlp.gate_proj.weight", {f, d});
    add(p + "mlp.up_proj.weight", {f, d});
    add(p + "mlp.down_proj.weight", {d, f});
  }
  add("model.norm.weight", {d});
  if (!s.tie_word_embeddings) add("lm_head.weight", {s.vocab_size, d});
  return t;
}

float random_weight_value(uint64_t seed, const LlamaShape& shape, const std::string& name,
                          int64_t i) {
  return value_at(generator_for(seed, shape, name), i);
}

std::string hf_config_json(const LlamaShape& s, DType dtype, const TokenizerSpec& tok) {
  // Keys in the order and spelling of the published config.json of each family.
  static const std::map<std::string, const char*> kClass = {{"llama", "LlamaForCausalLM"},
                                                            {"mistral", "MistralForCausalLM"},
                                                            {"qwen2", "Qwen2ForCausalLM"},
                                                            {"qwen3", "Qwen3ForCausalLM"}};
  const bool llama = s.arch == "llama", qwen = s.arch == "qwen2" || s.arch == "qwen3";
  nlohmann::ordered_json c;
  c["_name_or_path"] = "infercept-random-" + s.name;
  c["architectures"] = {kClass.at(s.arch)};
  if (llama || s.arch == "qwen3") c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["bos_token_id"] = tok.bos_id >= 0 ? nlohmann::ordered_json(tok.bos_id) : nullptr;
  c["eos_token_id"] = tok.eos_id >= 0 ? nlohmann::ordered_json(tok.eos_id) : nullptr;
  if (tok.pad_id >= 0) c["pad_token_id"] = tok.pad_id;
  if (s.arch != "qwen2") c["head_dim"] = s.head_dim();
  c["hidden_act"] = "silu";
  c["hidden_size"] = s.hidden_size;
  c["initializer_range"] = 0.02;
  c["intermediate_size"] = s.intermediate_size;
  c["max_position_embeddings"] = s.max_position_embeddings;
  if (qwen) c["max_window_layers"] = s.n_layers;
  if (llama) c["mlp_bias"] = false;
  c["model_type"] = s.arch;
  c["num_attention_heads"] = s.n_heads;
  c["num_hidden_layers"] = s.n_layers;
  c["num_key_value_heads"] = s.n_kv_heads;
  if (llama) c["pretraining_tp"] = 1;
  c["rms_norm_eps"] = s.rms_norm_eps;
  if (s.rope_scaling.type == "llama3") {
    c["rope_scaling"] = {{"factor", (double)s.rope_scaling.factor},
                         {"high_freq_factor", (double)s.rope_scaling.high_freq_factor},
                         {"low_freq_factor", (double)s.rope_scaling.low_freq_factor},
                         {"original_max_position_embeddings", s.rope_scaling.original_max_position},
                         {"rope_type", "llama3"}};
  } else if (s.arch != "mistral" && s.arch != "qwen2") {
    c["rope_scaling"] = nullptr;
  }
  c["rope_theta"] = s.rope_theta;
  // Qwen2.5 ships a window of 131072 with use_sliding_window false; Qwen3 and Mistral v0.3
  // null. Mistral's is on whenever it is not null.
  if (s.arch == "mistral")
    c["sliding_window"] = s.sliding_window > 0 ? nlohmann::ordered_json(s.sliding_window) : nullptr;
  if (s.arch == "qwen2") c["sliding_window"] = 131072;
  if (s.arch == "qwen3") c["sliding_window"] = nullptr;
  c["tie_word_embeddings"] = s.tie_word_embeddings;
  c["torch_dtype"] = dtype_torch_name(dtype);
  c["use_cache"] = true;
  if (qwen) c["use_sliding_window"] = false;
  c["vocab_size"] = s.vocab_size;
  return c.dump(2) + "\n";
}

namespace {

// The tokenizer the options ask for; *is_default tells whether it is the source's own.
Result<TokenizerSpec> choose_tokenizer(const RandomCheckpointOptions& o, bool* is_default) {
  *is_default = false;
  const int64_t vocab = o.shape.vocab_size;
  if (o.tokenizer_source.empty()) {
    if (o.tokenizer == CheckpointTokenizer::byte_level)
      return byte_level_tokenizer_spec(nullptr, vocab, 0);
    return make_error(
        "no tokenizer source given: the default model's tokenizer is needed "
        "(or ask for the byte-level tokenizer)");
  }
  TRY_ASSIGN(auto gguf, GgufFile::open(o.tokenizer_source, GgufLoad::container_only));
  TRY_ASSIGN(TokenizerSpec base, tokenizer_spec_from_gguf(*gguf));
  const bool fits = (int64_t)base.tokens.size() <= vocab;
  if (o.tokenizer == CheckpointTokenizer::default_model && !fits)
    return make_error("the tokenizer of '", o.tokenizer_source, "' has ",
                      std::to_string(base.tokens.size()), " tokens, more than the ",
                      std::to_string(vocab), " of shape ", o.shape.name,
                      " (use the byte-level tokenizer)");
  if (o.tokenizer != CheckpointTokenizer::byte_level && fits) {
    *is_default = true;
    return base;
  }
  return byte_level_tokenizer_spec(&base, vocab, o.max_byte_level_merges);
}

}  // namespace

Result<TokenizerSpec> random_checkpoint_tokenizer(const RandomCheckpointOptions& o) {
  bool is_default = false;
  return choose_tokenizer(o, &is_default);
}

Result<RandomCheckpointInfo> write_random_checkpoint(const RandomCheckpointOptions& o) {
  const LlamaShape& s = o.shape;
  if (o.dtype != DType::bf16 && o.dtype != DType::f16)
    return make_error("random checkpoint: dtype must be bf16 or f16, not ",
                      std::string(dtype_name(o.dtype)));
  if (o.out_dir.empty()) return make_error("random checkpoint: no output directory given");
  {
    ModelConfig c;
    c.arch = s.arch;
    c.n_layers = s.n_layers;
    c.d_model = s.hidden_size;
    c.n_heads = s.n_heads;
    c.n_kv_heads = s.n_kv_heads;
    c.head_dim = s.n_heads > 0 ? s.head_dim() : 0;
    c.d_ff = s.intermediate_size;
    c.vocab_size = s.vocab_size;
    c.max_context = s.max_position_embeddings;
    if (s.n_heads <= 0 || (s.explicit_head_dim == 0 && s.hidden_size % s.n_heads != 0))
      return make_error("shape ", s.name, ": hidden size is not a multiple of the head count");
    if (Status v = c.validate(); !v.ok())
      return make_error("shape ", s.name, ": ", v.error().message);
  }
  bool is_default = false;
  TRY_ASSIGN(TokenizerSpec tok, choose_tokenizer(o, &is_default));
  if ((int64_t)tok.tokens.size() > s.vocab_size)
    return make_error("the tokenizer has ", std::to_string(tok.tokens.size()),
                      " tokens, more than the model's vocabulary of ",
                      std::to_string(s.vocab_size));
  TRY_ASSIGN(const std::string tokenizer_json, hf_tokenizer_json(tok));
  TRY_ASSIGN(const std::string tokenizer_config,
             hf_tokenizer_config_json(tok, s.max_position_embeddings));

  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) return make_error("cannot create the output directory '", o.out_dir, "': ", ec.message());

  RandomCheckpointInfo info;
  info.default_tokenizer = is_default;
  info.tokenizer_vocab = (int64_t)tok.tokens.size();
  info.tokenizer_merges = (int64_t)tok.merges.size();

  nlohmann::ordered_json gen;
  gen["_from_model_config"] = true;
  if (tok.bos_id >= 0) gen["bos_token_id"] = tok.bos_id;
  if (tok.eos_id >= 0) gen["eos_token_id"] = tok.eos_id;
  if (tok.pad_id >= 0) gen["pad_token_id"] = tok.pad_id;
  const std::pair<const char*, std::string> text_files[] = {
      {"config.json", hf_config_json(s, o.dtype, tok)},
      {"generation_config.json", gen.dump(2) + "\n"},
      {"tokenizer.json", tokenizer_json},
      {"tokenizer_config.json", tokenizer_config},
  };
  for (const auto& [name, text] : text_files) {
    const std::string path = o.out_dir + "/" + name;
    TRY(write_text_file(path, text));
    info.files.push_back(path);
  }

  const std::vector<SafetensorsTensor> tensors = random_checkpoint_tensors(s, o.dtype);
  std::vector<TensorGen> gens;
  gens.reserve(tensors.size());
  for (const SafetensorsTensor& t : tensors) {
    gens.push_back(generator_for(o.seed, s, t.name));
    info.n_params += t.n_elements();
  }
  const DType dtype = o.dtype;
  TensorFill fill = [&](size_t index, int64_t first, int64_t count, void* out) {
    fill_range(gens[index], dtype, first, count, static_cast<uint16_t*>(out));
  };
  SafetensorsWriteOptions wo;
  wo.max_shard_bytes = o.max_shard_bytes;
  wo.n_threads = o.n_threads;
  wo.progress = o.progress;
  wo.metadata = {{"format", "pt"},
                 {"infercept_random_shape", s.name},
                 {"infercept_random_seed", std::to_string(o.seed)}};
  TRY_ASSIGN(SafetensorsWriteResult w, write_safetensors(o.out_dir, tensors, fill, wo));
  info.files.insert(info.files.end(), w.files.begin(), w.files.end());
  info.weight_bytes = w.data_bytes;
  info.weight_seconds = w.seconds;
  return info;
}

}  // namespace infercept
