// Non-owning views used by the backend interface. Activations are 2-D row-major matrices
// [rows, cols] with a row stride (in elements); their memory belongs to the backend that
// made them. Weights are matrices or vectors in a file format (possibly quantized).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace infercept {

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;  // elements between row starts (== cols when contiguous)

  template <typename T>
  T* row(int64_t r) const {
    return static_cast<T*>(data) + r * stride;
  }
  // Rows [begin, begin + n) as a view.
  Tensor slice_rows(int64_t begin, int64_t n) const;
  // Columns [begin, begin + n) as a strided view.
  Tensor slice_cols(int64_t begin, int64_t n) const;
};

struct Weight {
  const void* data = nullptr;  // backend-accessible memory (mapped file on the CPU)
  DType dtype = DType::f32;
  int64_t rows = 0;  // output features (1 for vectors)
  int64_t cols = 0;  // input features (elements for vectors)
  size_t row_bytes = 0;
  // A copy of the same matrix in a layout private to the backend that made it (the CPU
  // backend's interleaved rows, backend/cpu/packed_matmul.h), or null. `data` stays the file
  // layout: embedding lookups and other readers use it.
  const void* packed = nullptr;
  bool present() const { return data != nullptr; }
};

}  // namespace infercept
