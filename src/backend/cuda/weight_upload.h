// A model weight put on the device in the form the CUDA kernels read: vectors (norms, biases)
// as f32, matrices in the activation type (bf16 or f16), converted on the host from whatever
// the file holds (f32, f16, bf16 or a quantized GGUF type) in slabs of rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "backend/tensor.h"
#include "core/result.h"

namespace infercept::cuda {

// `alloc` returns device memory of at least that many bytes, or null when there is none
// (an error value then, naming the weight's shape). Start-up only: waits for its copies.
Result<Weight> upload_weight(const void* data, DType dtype, int64_t rows, int64_t cols, DType act,
                             const std::function<void*(size_t)>& alloc);

}  // namespace infercept::cuda
