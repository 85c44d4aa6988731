// Shape validation of a Llama-family checkpoint against its config (see model_validate.h).
#include "io/model_validate.h"

#include <string>

namespace infercept {

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {

Status expect(const ModelSource& src, const std::string& name, const std::vector<int64_t>& shape,
              bool required = true) {
  const TensorInfo* t = src.find(name);
  if (t == nullptr) {
    if (!required) return ok_status();
    return make_error(src.path(), ": missing tensor '", name, "' (expected shape ",
                      shape_to_string(shape), ")");
  }
  if (t->shape != shape)
    return make_error(t->file.empty() ? src.path() : t->file, ": tensor '", name, "' has shape ",
                      shape_to_string(t->shape), ", expected ", shape_to_string(shape));
  return ok_status();
}

}  // namespace

Status validate_llama_tensors(const ModelSource& src) {
  const ModelConfig& c = src.config();
  const int64_t d = c.d_model;
  const int64_t q_dim = c.n_heads * c.head_dim;
  const int64_t kv_dim = c.n_kv_heads * c.head_dim;
  TRY(expect(src, "token_embd.weight", {c.vocab_size, d}));
  TRY(expect(src, "output_norm.weight", {d}));
  TRY(expect(src, "output.weight", {c.vocab_size, d}, /*required=*/!c.tied_embeddings));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    TRY(expect(src, p + "attn_norm.weight", {d}));
    TRY(expect(src, p + "attn_q.weight", {q_dim, d}));
    TRY(expect(src, p + "attn_k.weight", {kv_dim, d}));
    TRY(expect(src, p + "attn_v.weight", {kv_dim, d}));
    TRY(expect(src, p + "attn_output.weight", {d, q_dim}));
    TRY(expect(src, p + "ffn_norm.weight", {d}));
    TRY(expect(src, p + "ffn_gate.weight", {c.d_ff, d}));
    TRY(expect(src, p + "ffn_up.weight", {c.d_ff, d}));
    TRY(expect(src, p + "ffn_down.weight", {d, c.d_ff}));
    if (c.qk_norm) {
      TRY(expect(src, p + "attn_q_norm.weight", {c.head_dim}));
      TRY(expect(src, p + "attn_k_norm.weight", {c.head_dim}));
    }
    if (c.qkv_bias) {
      TRY(expect(src, p + "attn_q.bias", {q_dim}));
      TRY(expect(src, p + "attn_k.bias", {kv_dim}));
      TRY(expect(src, p + "attn_v.bias", {kv_dim}));
    }
  }
  if (c.rope_scaling.has_freq_factors_tensor)
    TRY(expect(src, "rope_freqs.weight", {c.head_dim / 2}));
  return ok_status();
}

}  // namespace infercept
