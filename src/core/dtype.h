// Element types known to the engine. Quantized types are block formats (see io/quant.h):
// their "element" size is only meaningful per block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace infercept {

enum class DType : uint8_t {
  f32,
  f16,
  bf16,
  i32,
  q8_0,
  q4_0,
  q4_1,
  q4_k,
  q6_k,
  q8_1,      // activation format for integer dot products with q4_1 weights
  q8_k,      // activation format for k-quant dot products
  fp8_e4m3,  // KV cache only (core/fp8.h), with a scale per token and head (KvGeometry)
};

std::string_view dtype_name(DType t);

// Elements per block (1 for plain types).
int64_t dtype_block_elems(DType t);
// Bytes per block (element size for plain types).
size_t dtype_block_bytes(DType t);

inline bool dtype_is_quantized(DType t) {
  return dtype_block_elems(t) > 1;
}

// Bytes taken by `n` elements (n must be a multiple of the block size).
size_t dtype_row_bytes(DType t, int64_t n);

}  // namespace infercept
