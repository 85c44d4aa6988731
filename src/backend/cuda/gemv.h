// Skinny products for decode at small batch: out[n, m] = x[n, k] @ w[m, k]^T with few rows n.
// Such a product is bound by reading w once; cuBLASLt's GEMM tiles reached only 2.6-3.7 TB/s
// of the H200's 4.5 at n = 1 (docs/PERF.md 4.2), so rows up to gemv_max_rows() go here.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace infercept::cuda {

constexpr int kGemvMaxRows = 8;

// Whether gemv() takes this product: n <= kGemvMaxRows, bf16/f16 inputs, f32 or input-type
// output, k and the row stride multiples of 8 and x, w 16-byte aligned (whole vector loads).
bool gemv_fits(int64_t n, int64_t k, const void* x, int64_t x_stride, const void* w,
               DType in_dtype, DType out_dtype);
void gemv(const void* x, int64_t x_stride, DType in_dtype, const void* w, int64_t n, int64_t m,
          int64_t k, void* out, int64_t out_stride, DType out_dtype, cudaStream_t s);

}  // namespace infercept::cuda
