// out[n, m] = x[n, k] @ w[m, k]^T through cuBLASLt: bf16/f16 operands, f32 accumulation,
// output in the activation type or f32 (logits). Plans (layouts, algorithm) are cached per
// shape, so a step does no cuBLASLt set-up work after its first occurrence. The algorithm is
// asked of cuBLASLt's heuristic once per bucket of row counts (the next power of two) and
// reused for every row count of the bucket it supports: a step of a row count not seen before
// otherwise paid the heuristic and, when that picked a kernel not used yet, its module's lazy
// load, +2-4.5 ms a first sight on the H200 (docs/BENCHMARKS.md, session 10), and an agent
// workload's chunks meet hundreds of row counts. INFERCEPT_GEMM_BUCKETS=0 asks per row count.
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
  // cuBLASLt's first choice for `key`'s shape with `plan`'s descriptors (false: none).
  bool heuristic(const Plan& plan, cublasLtMatmulAlgo_t* algo) const;

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool buckets_ = true;
  std::map<Key, Plan> plans_;
  std::map<Key, cublasLtMatmulAlgo_t> bucket_algos_;  // by the key with n rounded up
};

}  // namespace infercept::cuda
