#include "backend/cuda/gemm.h"

#include <cstdio>

#include "backend/cuda/cuda_util.h"
#include "core/check.h"

#define CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                       \
    cublasStatus_t st_ = (expr);                                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                      \
      std::fprintf(stderr, "%s:%d: cuBLASLt error %d in %s\n", __FILE__, __LINE__, (int)st_, \
                   #expr);                                                                   \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

namespace infercept::cuda {
namespace {
cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    case DType::f32:
      return CUDA_R_32F;
    default:
      CHECK_MSG(false, "unsupported GEMM dtype");
  }
  return CUDA_R_32F;
}
}  // namespace

Gemm::Gemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) destroy_descriptors(p);
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

// Column-major view: C[m, n] = W^T... cuBLASLt is column-major, so the row-major product
// out[n, m] = x[n, k] * w[m, k]^T is computed as C(m x n) = op(A) * B with A = w seen as a
// column-major [k, m] matrix transposed, B = x seen as column-major [k, n], C = out seen as
// column-major [m, n] with leading dimension out_stride.
Gemm::Plan Gemm::descriptors(const Key& key) {
  const auto [n, m, k, xs, os, in_i, out_i] = key;
  const cudaDataType_t in_t = cuda_type((DType)in_i), out_t = cuda_type((DType)out_i);
  Plan p;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, in_t, (uint64_t)k, (uint64_t)m, k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, in_t, (uint64_t)k, (uint64_t)n, xs));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out_t, (uint64_t)m, (uint64_t)n, os));
  return p;
}

void Gemm::destroy_descriptors(Plan& p) {
  cublasLtMatrixLayoutDestroy(p.a);
  cublasLtMatrixLayoutDestroy(p.b);
  cublasLtMatrixLayoutDestroy(p.c);
  cublasLtMatmulDescDestroy(p.desc);
}

bool Gemm::heuristic(const Plan& p, cublasLtMatmulAlgo_t* algo) const {
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace_bytes_, sizeof workspace_bytes_));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) return false;
  *algo = result.algo;
  return true;
}

const Gemm::Plan& Gemm::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan p = descriptors(key);
  CHECK_MSG(heuristic(p, &p.algo), "cuBLASLt found no algorithm for a GEMM shape");
  return plans_.emplace(key, p).first->second;
}

void Gemm::run(const void* x, int64_t x_stride, DType in_dtype, const void* w, int64_t n, int64_t m,
               int64_t k, void* out, int64_t out_stride, DType out_dtype, cudaStream_t s,
               bool accumulate) {
  if (n == 0) return;
  const Plan& p = plan(Key{n, m, k, x_stride, out_stride, (int)in_dtype, (int)out_dtype});
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, out, p.c, out, p.c,
                              &p.algo, workspace_, workspace_bytes_, s));
}

}  // namespace infercept::cuda
