// Skinny products for decode at small batch: out[n, m] = x[n, k] @ w[m, k]^T with few rows n.
// Such a product is bound by reading w once; cuBLASLt's GEMM tiles reached only 2.6-3.7 TB/s
// of the H200's 4.5 at n = 1, so rows up to CudaBackendOptions::gemv_max_rows go here
// (docs/DESIGN.md, "The CUDA backend").
//
// At batch 1 a decoder layer is ~13 launches, and each launch's ramp-up and drain costs about
// as much as reading a 4096 x 4096 matrix (docs/PERF.md 4.5b). So the kernel also takes what
// sits around a product in a layer, to make one launch of several:
//   - a prologue that RMS-normalizes the input rows (the pre-norm of attention and FFN),
//   - up to three weights sharing the input in one launch (Q, K and V),
//   - epilogues: + bias; out += product (the residual add); silu(x w_gate) * (x w_up).
// And on sm_90 it is launched as a programmatic dependent (PDL): its blocks start while the
// previous kernel drains, load their first round of weights into registers, and only then
// wait for the previous kernel's output.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace infercept::cuda {

constexpr int kGemvMaxRows = 8;
constexpr int kGemvMaxSegments = 3;

enum class GemvEpilogue {
  store,       // out = x w^T (+ bias)
  accumulate,  // out += x w^T, rounded as a separate product-then-add would be
  gated,       // out = silu(x w^T) * (x w2^T): the SwiGLU gate and up products in one pass
};

// A Q/K/V product (store epilogue, norm, three segments, no bias) that computes its rows in
// the order of the KV heads (head 0's Q rows, K rows and V rows, then head 1's, ...) and counts
// each finished virtual block's rows into its head's counter, so that decode_rope_attention
// (DecodeRopeArgs::ready) can start on a head while the product still streams the weights of
// the later ones, instead of waiting for the whole launch (PERF 4.5p). The attention's blocks
// find room as the product's blocks retire (leaving them room from the start made the
// product slower by more than it gained).
struct GemvHeadSignal {
  int* ready = nullptr;  // [KV heads], zero before the launch; head h's ends at q_rows + 2 kv_rows
  int q_rows = 0;        // Q rows a KV head: query heads a KV head x head_dim
  int kv_rows = 0;       // K (and V) rows a KV head: head_dim
};

// One weight of a launch; all segments share the input rows and the epilogue.
struct GemvSegment {
  const void* w = nullptr;      // [m, k], the input type
  const void* w2 = nullptr;     // gated only: the up weight [m, k]
  const float* bias = nullptr;  // [m] or nullptr (store only)
  void* out = nullptr;          // [n, m] rows `out_stride` apart
  int64_t out_stride = 0;
  int m = 0;
};

struct GemvArgs {
  const void* x = nullptr;  // [n, k] rows `x_stride` apart
  int64_t x_stride = 0;
  int n = 0, k = 0;
  DType in_dtype = DType::bf16, out_dtype = DType::bf16;
  const float* norm = nullptr;  // [k]: x rows are RMS-normalized and scaled by it first
  float eps = 0.0f;
  GemvEpilogue epilogue = GemvEpilogue::store;
  GemvSegment seg[kGemvMaxSegments];
  int n_segments = 1;
  GemvHeadSignal signal;  // store only, see GemvHeadSignal; none when signal.ready is null
};

// Whether the arguments are well formed for any of the GEMV kernels: bf16/f16 inputs, f32
// or input-type output (input type for accumulate/gated/norm), gated with a norm and a second
// weight, accumulate without a norm, biases on store only, 1-3 segments, k and the row stride
// multiples of 8, x, the norm and every weight 16-byte aligned. Each kernel's fits adds its own
// limits (rows, shared memory, epilogues it takes).
bool gemv_args_valid(const GemvArgs& a);

// Whether gemv() takes these arguments: 1 <= n <= kGemvMaxRows, bf16/f16 inputs, f32 or
// input-type output (input type for accumulate/gated/norm), k and the row stride multiples
// of 8, x and every weight 16-byte aligned (whole vector loads), the normalized rows fit the
// shared memory of a block.
bool gemv_fits(const GemvArgs& a);
void gemv(const GemvArgs& a, cudaStream_t s);

// The same products on tensor cores (gemv_mma.cu), for a few more rows: up to
// kGemvMmaMaxRows, any epilogue, no GemvHeadSignal, k a multiple of 32, sm_80
// and later. Its cost hardly grows with the rows where gemv()'s does (every weight piece times
// every row on the CUDA cores); the backend takes it past gemv_max_rows (PERF 4.5r).
constexpr int kGemvMmaMaxRows = 16;
bool gemv_mma_fits(const GemvArgs& a);
void gemv_mma(const GemvArgs& a, cudaStream_t s);

// The plain product of one weight (store epilogue, no norm, no bias).
bool gemv_fits(int64_t n, int64_t k, const void* x, int64_t x_stride, const void* w, DType in_dtype,
               DType out_dtype);
void gemv(const void* x, int64_t x_stride, DType in_dtype, const void* w, int64_t n, int64_t m,
          int64_t k, void* out, int64_t out_stride, DType out_dtype, cudaStream_t s);

}  // namespace infercept::cuda
