#include "model/weights.h"

#include <string>

namespace infercept {
namespace {

// Looks up `name` and checks it has `rows` x `cols` elements (rows == 0 for a vector).
Result<Weight> load(const ModelSource& src, Backend& backend, ModelWeights& m,
                    const std::string& name, int64_t rows, int64_t cols, bool optional = false) {
  const TensorInfo* t = src.find(name);
  if (t == nullptr) {
    if (optional) return Weight{};
    return make_error(src.path(), ": missing tensor '", name, "'");
  }
  const bool is_vector = rows == 0;
  const bool shape_ok = is_vector
                            ? (t->shape.size() == 1 && t->shape[0] == cols)
                            : (t->shape.size() == 2 && t->shape[0] == rows && t->shape[1] == cols);
  if (!shape_ok) {
    std::string got;
    for (size_t i = 0; i < t->shape.size(); ++i)
      got += (i ? "x" : "") + std::to_string(t->shape[i]);
    return make_error(
        src.path(), ": tensor '", name, "' has shape ", got, ", expected ",
        is_vector ? std::to_string(cols) : std::to_string(rows) + "x" + std::to_string(cols));
  }
  const void* data = t->data;
  DType dtype = t->dtype;
  if (is_vector && dtype != DType::f32) {
    if (cols % dtype_block_elems(dtype) != 0)
      return make_error(src.path(), ": tensor '", name, "' cannot be converted to f32");
    auto& v = m.converted.emplace_back((size_t)cols);
    dequantize_to_f32(dtype, data, v.data(), cols);
    data = v.data();
    dtype = DType::f32;
  }
  auto w = backend.upload_weight(data, dtype, is_vector ? 1 : rows, cols);
  if (!w.ok()) return make_error(src.path(), ": tensor '", name, "': ", w.error().message);
  return w;
}

}  // namespace

Result<ModelWeights> load_weights(const ModelSource& src, Backend& backend) {
  const ModelConfig& c = src.config();
  TRY(c.validate());
  ModelWeights m;
  m.converted.reserve((size_t)c.n_layers * 7 + 2);  // no reallocation: Weights point in
  const int64_t d = c.d_model, q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  TRY_ASSIGN(m.tok_embd, load(src, backend, m, "token_embd.weight", c.vocab_size, d));
  TRY_ASSIGN(m.output_norm, load(src, backend, m, "output_norm.weight", 0, d));
  TRY_ASSIGN(m.output, load(src, backend, m, "output.weight", c.vocab_size, d, /*optional=*/true));
  if (!m.output.present()) m.output = m.tok_embd;
  m.layers.resize((size_t)c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& w = m.layers[(size_t)l];
    TRY_ASSIGN(w.attn_norm, load(src, backend, m, p + "attn_norm.weight", 0, d));
    TRY_ASSIGN(w.wq, load(src, backend, m, p + "attn_q.weight", q_dim, d));
    TRY_ASSIGN(w.wk, load(src, backend, m, p + "attn_k.weight", kv_dim, d));
    TRY_ASSIGN(w.wv, load(src, backend, m, p + "attn_v.weight", kv_dim, d));
    TRY_ASSIGN(w.wo, load(src, backend, m, p + "attn_output.weight", d, q_dim));
    TRY_ASSIGN(w.bq, load(src, backend, m, p + "attn_q.bias", 0, q_dim, true));
    TRY_ASSIGN(w.bk, load(src, backend, m, p + "attn_k.bias", 0, kv_dim, true));
    TRY_ASSIGN(w.bv, load(src, backend, m, p + "attn_v.bias", 0, kv_dim, true));
    if (c.qk_norm) {
      TRY_ASSIGN(w.q_norm, load(src, backend, m, p + "attn_q_norm.weight", 0, c.head_dim));
      TRY_ASSIGN(w.k_norm, load(src, backend, m, p + "attn_k_norm.weight", 0, c.head_dim));
    }
    TRY_ASSIGN(w.ffn_norm, load(src, backend, m, p + "ffn_norm.weight", 0, d));
    TRY_ASSIGN(w.w_gate, load(src, backend, m, p + "ffn_gate.weight", c.d_ff, d));
    TRY_ASSIGN(w.w_up, load(src, backend, m, p + "ffn_up.weight", c.d_ff, d));
    TRY_ASSIGN(w.w_down, load(src, backend, m, p + "ffn_down.weight", d, c.d_ff));
  }
  return m;
}

}  // namespace infercept
