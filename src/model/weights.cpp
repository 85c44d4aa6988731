#include "model/weights.h"

#include <cstring>
#include <string>

#include "core/check.h"

namespace infercept {
namespace {

// The part of a tensor one tensor-parallel rank holds: rows [begin, begin + count) of a
// matrix (its outputs; elements of a vector), or its columns (inputs). count 0: all of it.
struct Slice {
  enum { whole, rows, cols } along = whole;
  int64_t begin = 0, count = 0;
};

Slice rows_of(const TensorParallel& tp, int64_t n) {
  return tp.sharded() ? Slice{Slice::rows, n / tp.world * tp.rank, n / tp.world} : Slice{};
}
Slice cols_of(const TensorParallel& tp, int64_t n) {
  return tp.sharded() ? Slice{Slice::cols, n / tp.world * tp.rank, n / tp.world} : Slice{};
}

// Looks up `name` and checks it has `rows` x `cols` elements (rows == 0 for a vector), then
// uploads the `slice` of it this rank holds.
Result<Weight> load(const ModelSource& src, Backend& backend, ModelWeights& m,
                    const std::string& name, int64_t rows, int64_t cols, bool optional = false,
                    Slice slice = {}) {
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
  int64_t up_rows = is_vector ? 1 : rows, up_cols = cols;
  if (is_vector && slice.along == Slice::rows) {
    // A vector's "rows" are its elements (biases of column-parallel products).
    data = static_cast<const uint8_t*>(data) + dtype_row_bytes(dtype, slice.begin);
    up_cols = slice.count;
  } else if (slice.along == Slice::rows) {
    // Whole rows are contiguous in the file: the slice is a view of it.
    data = static_cast<const uint8_t*>(data) + (size_t)slice.begin * dtype_row_bytes(dtype, cols);
    up_rows = slice.count;
  } else if (slice.along == Slice::cols) {
    // A run of each row's inputs, copied into storage of the rank's own: whole quantization
    // blocks only (a file may quantize this tensor differently from blk.0's wo, which
    // check_tensor_parallel saw).
    CHECK(!is_vector);
    const int64_t block = dtype_block_elems(dtype);
    if (slice.begin % block != 0 || slice.count % block != 0)
      return make_error(src.path(), ": tensor '", name, "' (", std::string(dtype_name(dtype)),
                        ") cannot be split over ", std::to_string(cols / slice.count),
                        " tensor-parallel ranks: a rank's ", std::to_string(slice.count),
                        " inputs are not whole blocks of ", std::to_string(block));
    const size_t row = dtype_row_bytes(dtype, cols), skip = dtype_row_bytes(dtype, slice.begin),
                 part = dtype_row_bytes(dtype, slice.count);
    auto& bytes = m.sliced.emplace_back((size_t)rows * part);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(bytes.data() + (size_t)r * part,
                  static_cast<const uint8_t*>(data) + (size_t)r * row + skip, part);
    data = bytes.data();
    up_cols = slice.count;
  }
  auto w = backend.upload_weight(data, dtype, up_rows, up_cols);
  if (!w.ok()) return make_error(src.path(), ": tensor '", name, "': ", w.error().message);
  return w;
}

}  // namespace

Result<ModelWeights> load_weights(const ModelSource& src, Backend& backend,
                                  const TensorParallel& tp) {
  const ModelConfig& c = src.config();
  TRY(c.validate());
  if (tp.sharded()) {
    const TensorInfo* wo = src.find("blk.0.attn_output.weight");
    TRY(check_tensor_parallel(c, tp.world, wo != nullptr ? wo->dtype : DType::f32));
  }
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
    TRY_ASSIGN(w.wq,
               load(src, backend, m, p + "attn_q.weight", q_dim, d, false, rows_of(tp, q_dim)));
    TRY_ASSIGN(w.wk,
               load(src, backend, m, p + "attn_k.weight", kv_dim, d, false, rows_of(tp, kv_dim)));
    TRY_ASSIGN(w.wv,
               load(src, backend, m, p + "attn_v.weight", kv_dim, d, false, rows_of(tp, kv_dim)));
    TRY_ASSIGN(
        w.wo, load(src, backend, m, p + "attn_output.weight", d, q_dim, false, cols_of(tp, q_dim)));
    TRY_ASSIGN(w.bq, load(src, backend, m, p + "attn_q.bias", 0, q_dim, true, rows_of(tp, q_dim)));
    TRY_ASSIGN(w.bk,
               load(src, backend, m, p + "attn_k.bias", 0, kv_dim, true, rows_of(tp, kv_dim)));
    TRY_ASSIGN(w.bv,
               load(src, backend, m, p + "attn_v.bias", 0, kv_dim, true, rows_of(tp, kv_dim)));
    if (c.qk_norm) {
      TRY_ASSIGN(w.q_norm, load(src, backend, m, p + "attn_q_norm.weight", 0, c.head_dim));
      TRY_ASSIGN(w.k_norm, load(src, backend, m, p + "attn_k_norm.weight", 0, c.head_dim));
    }
    TRY_ASSIGN(w.ffn_norm, load(src, backend, m, p + "ffn_norm.weight", 0, d));
    TRY_ASSIGN(w.w_gate,
               load(src, backend, m, p + "ffn_gate.weight", c.d_ff, d, false, rows_of(tp, c.d_ff)));
    TRY_ASSIGN(w.w_up,
               load(src, backend, m, p + "ffn_up.weight", c.d_ff, d, false, rows_of(tp, c.d_ff)));
    TRY_ASSIGN(w.w_down,
               load(src, backend, m, p + "ffn_down.weight", d, c.d_ff, false, cols_of(tp, c.d_ff)));
  }
  return m;
}

}  // namespace infercept
