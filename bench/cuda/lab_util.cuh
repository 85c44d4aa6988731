// Helpers shared by the CUDA labs (gemv_lab.cu, chain_lab.cu): error check, a bf16 x 8 dot
// product, a streaming read of a buffer, an fp32 reference product, a hashed fill, and the
// relative error of a result against its reference.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/cuda_util.h"

// A CUDA call that fails ends the lab with its file, line and message (exit code 3).
#define CK(expr)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (expr);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(3);                                                                               \
    }                                                                                             \
  } while (0)

namespace lab {

using infercept::cuda::load_stream;

// The sum of the 8 bf16 products of two 16-byte pieces, in fp32.
__device__ __forceinline__ float dot8(const uint4& w, const uint4& x) {
  const uint32_t a[4] = {w.x, w.y, w.z, w.w}, b[4] = {x.x, x.y, x.z, x.w};
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s = fmaf(__uint_as_float(a[i] << 16), __uint_as_float(b[i] << 16), s);
    s = fmaf(__uint_as_float(a[i] & 0xffff0000u), __uint_as_float(b[i] & 0xffff0000u), s);
  }
  return s;
}

// One warp's partial dot product of a weight row (nv 16-byte pieces) with xs (the input in
// shared memory) from piece c_begin on, in rounds of U loads a lane: the lane's share.
template <int U, int Hint = 0>
__device__ __forceinline__ float warp_row_partial(const uint4* __restrict__ wr, const uint4* xs,
                                                  int nv, int c_begin, int lane) {
  float acc = 0.0f;
  for (int c0 = c_begin; c0 < nv; c0 += 32 * U) {
    uint4 v[U];
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int c = c0 + lane + 32 * i;
      v[i] = c < nv ? load_stream<Hint>(wr + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int c = c0 + lane + 32 * i;
      if (c < nv) acc += dot8(v[i], xs[c]);
    }
  }
  return acc;
}

// The sum of a value over the warp's 32 lanes, in every lane.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// --- read U: every byte of [p, p + n pieces) once (Hint: load_stream's L2 hint) ---
template <int U, int Hint = 0>
__global__ void __launch_bounds__(256)
    read_kernel(const uint4* __restrict__ p, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = load_stream<Hint>(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = load_stream<Hint>(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads; practically never true
}

// fp32 reference: one block per row.
__global__ void reference_kernel(const __nv_bfloat16* w, const __nv_bfloat16* x, float* out,
                                 int k) {
  __shared__ float part[256];
  float s = 0.0f;
  for (int c = threadIdx.x; c < k; c += blockDim.x)
    s += __bfloat162float(w[(size_t)blockIdx.x * k + c]) * __bfloat162float(x[c]);
  part[threadIdx.x] = s;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o /= 2) {
    if ((int)threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

// Deterministic pseudo-random bf16 values in [-1/16, 1/16) from a hash of the index and seed.
__global__ void fill_kernel(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16(((float)(h & 0xffff) / 65536.0f - 0.5f) * 0.125f);
  }
}

// Microseconds a call of `run` takes on stream s: three calls to warm up, then the mean of
// `reps` calls between two events.
template <class F>
double time_us(cudaStream_t s, int reps, F&& run) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int r = 0; r < 3; ++r) run(r);
  CK(cudaEventRecord(e0, s));
  for (int r = 0; r < reps; ++r) run(r);
  CK(cudaEventRecord(e1, s));
  CK(cudaEventSynchronize(e1));
  CK(cudaGetLastError());
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return 1000.0 * ms / reps;
}

// ||a - ref|| / ||ref||, and how many of a are NaN.
inline double rel_error(const std::vector<float>& a, const std::vector<float>& ref, int* nans) {
  double num = 0, den = 0;
  *nans = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) ++*nans;
    num += (double)(a[i] - ref[i]) * (a[i] - ref[i]);
    den += (double)ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace lab
