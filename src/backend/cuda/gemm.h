// out[n, m] = x[n, k] @ w[m, k]^T through cuBLASLt: bf16/f16 operands, f32 accumulation,
// output in the activation type or f32 (logits). Plans (layouts, algorithm) are cached per
// shape, so a step does no cuBLASLt set-up work after its first occurrence. A step of a row
// count not seen before pays cuBLASLt's heuristic and, when that picks a kernel not used yet,
// its module's lazy load: +2-4.5 ms a first sight on the H200 (docs/PERF.md 4.5j), and an
// agent workload's chunks meet hundreds of row counts. Sharing one algorithm per bucket of
// row counts (a power of two each) removed the first sights' cost but made some row counts
// slower for good (304 rows +37% on the H200), so every count gets its own.
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
  // The descriptors of `key`'s shape (no algorithm yet), and their release.
  static Plan descriptors(const Key& key);
  static void destroy_descriptors(Plan& p);
  // cuBLASLt's first choice for the shape `plan` describes (false: none).
  bool heuristic(const Plan& plan, cublasLtMatmulAlgo_t* algo) const;

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace infercept::cuda
