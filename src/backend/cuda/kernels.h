// Launchers of the CUDA backend's element-wise, normalization, RoPE/KV-store and block-copy
// kernels. Activations are bf16 or f16 (`act`), rows strided; norm weights and biases f32.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace infercept::cuda {

struct RowsView {  // a strided [rows, cols] device matrix
  void* data;
  int64_t rows, cols, stride;
  DType dtype;
};

void embed(const void* table, DType table_dtype, const int32_t* tokens, RowsView out,
           cudaStream_t s);
// out = x / rms(x) * w; with `residual`: residual += x first and the sum is normalized.
void rmsnorm(RowsView x, const float* w, float eps, RowsView out, RowsView* residual,
             cudaStream_t s);
// Each head_dim-wide slice of each row of x, in place: slice / rms(slice) * w (w: [head_dim]).
void head_rmsnorm(RowsView x, const float* w, int head_dim, float eps, cudaStream_t s);
void add_bias(RowsView out, const float* bias, cudaStream_t s);
void silu_mul(RowsView gate, RowsView up, RowsView out, cudaStream_t s);
void add(RowsView a, RowsView b, cudaStream_t s);
void gather_rows(RowsView x, const int32_t* rows, RowsView out, cudaStream_t s);
void convert_to_f32(RowsView x, float* dst, cudaStream_t s);
// out[r] = the lowest column index holding row r's largest value (f32 rows).
void argmax_rows(RowsView x, int32_t* out, cudaStream_t s);

struct RopeStoreArgs {
  RowsView q, k, v;  // q, k rotated in place; k, v rows also written to the cache
  const int32_t* positions;
  const int32_t* slots;       // nullptr: rope only
  const float* freq_factors;  // [head_dim/2] or nullptr
  int head_dim, n_heads, n_kv_heads;
  bool neox;
  float theta_base;
  // This layer's K and V: [n_slots, n_kv_heads * head_dim] of bf16 or f16; of fp8 e4m3, blocks
  // of block_size slots' codes followed by their scales (KvGeometry).
  void* k_cache;
  void* v_cache;
  DType kv_dtype;
  int block_size;  // fp8 only
};
void rope_store_kv(const RopeStoreArgs& a, cudaStream_t s);
// rope_store_kv into an fp8 cache (rope_store_fp8.cu): each stored head quantized with its own
// scale by core/fp8.h, the CPU backend's bits for the same (T-rounded) values.
void rope_store_kv_fp8(const RopeStoreArgs& a, cudaStream_t s);

// Copies `n` chunks of `chunk_bytes` (a multiple of 16): dst[dst_idx[i]] = src[src_idx[i]],
// for `n_planes` planes (layer x K/V) whose bases are src_planes[p] / dst_planes[p]. The
// pointers may be mapped pinned host memory: one launch moves many KV blocks.
void copy_chunks(const char* const* src_planes, char* const* dst_planes, int n_planes,
                 const int32_t* src_idx, const int32_t* dst_idx, int n, size_t chunk_bytes,
                 int max_ctas, cudaStream_t s);

// dst = src, bytes by the SMs rather than a copy engine. Either side may be mapped pinned
// host memory: a step's few KB of inputs and sampled ids then never queue on a copy engine
// behind the swap engine's bulk copies of KV blocks (which can take milliseconds).
void copy_bytes(void* dst, const void* src, size_t bytes, cudaStream_t s);

}  // namespace infercept::cuda
