// out[n, m] = x[n, k] @ w[m, k]^T through cuBLASLt: bf16/f16 operands, f32 accumulation,
// output in the activation type or f32 (logits). Plans (layouts, heuristic algorithm) are
// cached per shape, so a step does no cuBLASLt set-up work after its first occurrence.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "core/dtype.h"

namespace infercept::cuda {

class Gemm {
 public:
  explicit Gemm(size_t workspace_bytes = 32u << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // accumulate: out += the product (beta = 1; one rounding of the f32 sum).
  void run(const void* x, int64_t x_stride, DType in_dtype, const void* w, int64_t n, int64_t m,
           int64_t k, void* out, int64_t out_stride, DType out_dtype, cudaStream_t s,
           bool accumulate = false);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int, int>;
  const Plan& plan(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace infercept::cuda
