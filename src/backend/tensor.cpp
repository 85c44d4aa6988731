#include "backend/tensor.h"
#include "backend/backend.h"

#include "core/check.h"

namespace infercept {

Tensor Tensor::slice_rows(int64_t begin, int64_t n) const {
  CHECK(begin >= 0 && n >= 0 && begin + n <= rows);
  Tensor t = *this;
  t.data = static_cast<char*>(data) + (size_t)(begin * stride) * dtype_block_bytes(dtype);
  t.rows = n;
  return t;
}

Tensor Tensor::slice_cols(int64_t begin, int64_t n) const {
  CHECK(begin >= 0 && n >= 0 && begin + n <= cols);
  CHECK(!dtype_is_quantized(dtype));
  Tensor t = *this;
  t.data = static_cast<char*>(data) + (size_t)begin * dtype_block_bytes(dtype);
  t.cols = n;
  return t;
}

size_t KvGeometry::slot_bytes() const {
  return (size_t)(n_kv_heads * head_dim) * dtype_block_bytes(dtype);
}

size_t KvGeometry::bytes_per_block_per_layer() const {
  return (size_t)block_size * slot_bytes() +
         (has_scales() ? (size_t)(block_size * n_kv_heads) * sizeof(float) : 0);
}

size_t KvGeometry::slot_offset(int64_t slot) const {
  return (size_t)(slot / block_size) * bytes_per_block_per_layer() +
         (size_t)(slot % block_size) * slot_bytes();
}

size_t KvGeometry::scale_offset(int64_t slot) const {
  return (size_t)(slot / block_size) * bytes_per_block_per_layer() +
         (size_t)block_size * slot_bytes() +
         (size_t)((slot % block_size) * n_kv_heads) * sizeof(float);
}

size_t KvGeometry::total_bytes() const {
  return bytes_per_block_per_layer() * 2 * (size_t)n_blocks * (size_t)n_layers;
}

}  // namespace infercept
