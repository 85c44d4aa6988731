// A tiny GGUF writer for tests: builds v2/v3 files byte by byte so reader tests can make
// valid files of every metadata and tensor type, and corrupt them in controlled ways (count
// overrides, raw key/values, explicit tensor offsets). Not a general-purpose writer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace infercept::testing {

// ggml type ids used in tests.
enum GgmlType : uint32_t {
  kGgmlF32 = 0,
  kGgmlF16 = 1,
  kGgmlQ4_0 = 2,
  kGgmlQ4_1 = 3,
  kGgmlQ8_0 = 8,
  kGgmlQ8_1 = 9,
  kGgmlQ4_K = 12,
  kGgmlQ6_K = 14,
  kGgmlI32 = 26,
  kGgmlBF16 = 30,
};

class GgufWriter {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;  // layout alignment; add_u32("general.alignment", ..) to declare it
  std::optional<uint64_t> tensor_count_override;
  std::optional<uint64_t> kv_count_override;
  std::string magic = "GGUF";

  static void put_u32(std::string& b, uint32_t v) { b.append((const char*)&v, 4); }
  static void put_u64(std::string& b, uint64_t v) { b.append((const char*)&v, 8); }
  static void put_str(std::string& b, const std::string& s) {
    put_u64(b, s.size());
    b += s;
  }

  // A key/value whose value encoding (after the type id) is given raw.
  void add_raw(const std::string& key, uint32_t type, const std::string& value_bytes) {
    std::string b;
    put_str(b, key);
    put_u32(b, type);
    b += value_bytes;
    kvs_.push_back(b);
  }
  template <typename T>
  void add_scalar(const std::string& key, uint32_t type, T v) {
    add_raw(key, type, std::string((const char*)&v, sizeof(T)));
  }
  void add_u8(const std::string& k, uint8_t v) { add_scalar(k, 0, v); }
  void add_i8(const std::string& k, int8_t v) { add_scalar(k, 1, v); }
  void add_u16(const std::string& k, uint16_t v) { add_scalar(k, 2, v); }
  void add_i16(const std::string& k, int16_t v) { add_scalar(k, 3, v); }
  void add_u32(const std::string& k, uint32_t v) { add_scalar(k, 4, v); }
  void add_i32(const std::string& k, int32_t v) { add_scalar(k, 5, v); }
  void add_f32(const std::string& k, float v) { add_scalar(k, 6, v); }
  void add_bool(const std::string& k, bool v) { add_scalar(k, 7, (uint8_t)(v ? 1 : 0)); }
  void add_u64(const std::string& k, uint64_t v) { add_scalar(k, 10, v); }
  void add_i64(const std::string& k, int64_t v) { add_scalar(k, 11, v); }
  void add_f64(const std::string& k, double v) { add_scalar(k, 12, v); }
  void add_string(const std::string& k, const std::string& v) {
    std::string b;
    put_str(b, v);
    add_raw(k, 8, b);
  }
  void add_string_array(const std::string& k, const std::vector<std::string>& v) {
    std::string b;
    put_u32(b, 8);
    put_u64(b, v.size());
    for (const auto& s : v) put_str(b, s);
    add_raw(k, 9, b);
  }
  template <typename T>
  void add_array(const std::string& k, uint32_t elem_type, const std::vector<T>& v) {
    std::string b;
    put_u32(b, elem_type);
    put_u64(b, v.size());
    for (const T& x : v) b.append((const char*)&x, sizeof(T));
    add_raw(k, 9, b);
  }

  // ne is fastest-varying first, as GGUF stores it.
  void add_tensor(const std::string& name, uint32_t type, std::vector<uint64_t> ne,
                  std::string data, std::optional<uint64_t> offset = std::nullopt) {
    tensors_.push_back({name, type, std::move(ne), std::move(data), offset});
  }

  std::string build() const {
    std::string b = magic;
    put_u32(b, version);
    put_u64(b, tensor_count_override.value_or(tensors_.size()));
    put_u64(b, kv_count_override.value_or(kvs_.size()));
    for (const auto& kv : kvs_) b += kv;
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const auto& t : tensors_) {
      const uint64_t off = t.offset.value_or(next);
      offsets.push_back(off);
      next = align(std::max(next, off + t.data.size()));
      put_str(b, t.name);
      put_u32(b, (uint32_t)t.ne.size());
      for (uint64_t d : t.ne) put_u64(b, d);
      put_u32(b, t.type);
      put_u64(b, off);
    }
    if (tensors_.empty()) return b;
    b.resize(align(b.size()), '\0');
    const size_t data_start = b.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const size_t at = data_start + offsets[i];
      if (b.size() < at + tensors_[i].data.size()) b.resize(at + tensors_[i].data.size(), '\0');
      std::memcpy(&b[at], tensors_[i].data.data(), tensors_[i].data.size());
    }
    return b;
  }

 private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> ne;
    std::string data;
    std::optional<uint64_t> offset;
  };
  uint64_t align(uint64_t x) const { return (x + alignment - 1) / alignment * alignment; }

  std::vector<std::string> kvs_;
  std::vector<Tensor> tensors_;
};

// Bytes of `n` f32 values following a simple pattern (distinct per `seed`).
inline std::string f32_bytes(size_t n, float seed) {
  std::string b(n * 4, '\0');
  for (size_t i = 0; i < n; ++i) {
    const float v = seed + 0.001f * (float)i;
    std::memcpy(&b[i * 4], &v, 4);
  }
  return b;
}

struct TinyLlama {
  int64_t n_layers = 2, d = 16, n_heads = 4, n_kv = 2, d_ff = 32, vocab = 24;
  bool tied = true;
  bool qkv_bias = false;
  bool qk_norm = false;           // Qwen3's attn_q_norm / attn_k_norm
  int64_t explicit_head_dim = 0;  // written as attention.key_length / value_length
  std::string arch = "llama";
  // A tensor written as q4_1 instead of f32 (its input width a multiple of 32): a file that
  // quantizes one tensor differently from the rest.
  std::string q4_1_tensor;
  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : d / n_heads; }
};

// Adds the metadata and f32 tensors of a tiny Llama-shaped model.
inline void add_tiny_llama(GgufWriter& w, const TinyLlama& m) {
  const std::string a = m.arch + ".";
  w.add_string("general.architecture", m.arch);
  w.add_string("general.name", "tiny");
  w.add_u32(a + "block_count", (uint32_t)m.n_layers);
  w.add_u32(a + "embedding_length", (uint32_t)m.d);
  w.add_u32(a + "feed_forward_length", (uint32_t)m.d_ff);
  w.add_u32(a + "attention.head_count", (uint32_t)m.n_heads);
  w.add_u32(a + "attention.head_count_kv", (uint32_t)m.n_kv);
  w.add_u32(a + "context_length", 256);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.add_f32(a + "rope.freq_base", 50000.0f);
  if (m.explicit_head_dim > 0) {
    w.add_u32(a + "attention.key_length", (uint32_t)m.explicit_head_dim);
    w.add_u32(a + "attention.value_length", (uint32_t)m.explicit_head_dim);
  }
  std::vector<std::string> toks;
  for (int64_t i = 0; i < m.vocab; ++i) toks.push_back("t" + std::to_string(i));
  w.add_string_array("tokenizer.ggml.tokens", toks);
  const uint64_t d = (uint64_t)m.d, q = (uint64_t)(m.n_heads * m.head_dim()),
                 kv = (uint64_t)(m.n_kv * m.head_dim()), ff = (uint64_t)m.d_ff,
                 v = (uint64_t)m.vocab;
  float seed = 0.0f;
  auto add = [&](const std::string& name, std::vector<uint64_t> ne) {
    size_t n = 1;
    for (uint64_t x : ne) n *= x;
    seed += 1.0f;
    if (name == m.q4_1_tensor) {  // blocks of 32: an f16 scale and minimum, 16 bytes of nibbles
      std::string q((size_t)(n / 32) * 20, '\0');
      for (size_t b = 0; b < n / 32; ++b) q[b * 20 + 1] = 0x3c;  // scale 1.0
      w.add_tensor(name, kGgmlQ4_1, ne, q);
      return;
    }
    w.add_tensor(name, kGgmlF32, ne, f32_bytes(n, seed));
  };
  add("token_embd.weight", {d, v});
  add("output_norm.weight", {d});
  if (!m.tied) add("output.weight", {d, v});
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", {d});
    add(p + "attn_q.weight", {d, q});
    add(p + "attn_k.weight", {d, kv});
    add(p + "attn_v.weight", {d, kv});
    if (m.qkv_bias) {
      add(p + "attn_q.bias", {q});
      add(p + "attn_k.bias", {kv});
      add(p + "attn_v.bias", {kv});
    }
    if (m.qk_norm) {
      add(p + "attn_q_norm.weight", {(uint64_t)m.head_dim()});
      add(p + "attn_k_norm.weight", {(uint64_t)m.head_dim()});
    }
    add(p + "attn_output.weight", {q, d});
    add(p + "ffn_norm.weight", {d});
    add(p + "ffn_gate.weight", {d, ff});
    add(p + "ffn_up.weight", {d, ff});
    add(p + "ffn_down.weight", {ff, d});
  }
}

}  // namespace infercept::testing
