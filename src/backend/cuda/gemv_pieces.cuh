// The 16-byte pieces the GEMV kernels (gemv.cu, gemv_mma.cu) stream: eight bf16
// or f16 values unpacked to f32, packed back (rounded as from_f32), and the dot product of two
// pieces summed in element order; and the input rows staged in shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gemv.h"

namespace infercept::cuda {

template <typename T>
__device__ __forceinline__ void unpack8(const uint4& v, float f[8]);
template <>
__device__ __forceinline__ void unpack8<__nv_bfloat16>(const uint4& v, float f[8]) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // bf16 is the top half of an f32
    f[2 * i] = __uint_as_float(u[i] << 16);
    f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}
template <>
__device__ __forceinline__ void unpack8<__half>(const uint4& v, float f[8]) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

template <typename T>
__device__ __forceinline__ uint4 pack8(const float f[8]) {
  uint32_t u[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const T lo = from_f32<T>(f[2 * i]), hi = from_f32<T>(f[2 * i + 1]);
    u[i] = (uint32_t) * reinterpret_cast<const uint16_t*>(&lo) |
           ((uint32_t) * reinterpret_cast<const uint16_t*>(&hi) << 16);
  }
  return make_uint4(u[0], u[1], u[2], u[3]);
}

template <typename T>
__device__ __forceinline__ float dot8(const uint4& w, const uint4& x) {
  float a[8], b[8], s = 0.0f;
  unpack8<T>(w, a);
  unpack8<T>(x, b);
#pragma unroll
  for (int i = 0; i < 8; ++i) s = fmaf(a[i], b[i], s);
  return s;
}

// A segment of a fused product as a GEMV kernel walks it: the GemvSegment, and the first of the
// units (gemv.cu's virtual blocks, the tiles of gemv_mma.cu) that compute its
// rows: units [first, the next segment's first) are its.
struct UnitSegment {
  const void* w;
  const void* w2;  // gated: the up weight
  const float* bias;
  void* out;
  int64_t out_stride;
  int m;  // rows
  int first;
};

// a's segments laid out in units of `rows_per_unit` rows, into seg[0 .. a.n_segments); the
// units in all.
inline int lay_out_segments(const GemvArgs& a, int rows_per_unit, UnitSegment* seg) {
  int units = 0;
  for (int i = 0; i < a.n_segments; ++i) {
    const GemvSegment& g = a.seg[i];
    const int m = g.m;
    seg[i] = UnitSegment{g.w, g.w2, g.bias, g.out, g.out_stride, m, units};
    units += ceil_div(m, rows_per_unit);
  }
  return units;
}

// The segment that unit `u` computes rows of.
__device__ __forceinline__ int segment_of(const UnitSegment* seg, int n_segments, int u) {
  int s = 0;
  while (s + 1 < n_segments && u >= seg[s + 1].first) ++s;
  return s;
}

// One output of a product with epilogue kEpi (store, accumulate or gated), the same in every
// GEMV kernel: v plus *bias (when not null) stored; v added to *out, rounded as the unfused
// product (to OutT) and residual add (to OutT) would be; or silu(gate) * up of the gate and up
// products v and v2, each rounded to OutT first as the unfused products store them.
template <GemvEpilogue kEpi, typename OutT>
__device__ __forceinline__ void write_output(OutT* out, float v, float v2, const float* bias) {
  if constexpr (kEpi == GemvEpilogue::store) {
    if (bias != nullptr) v += *bias;
    *out = from_f32<OutT>(v);
  } else if constexpr (kEpi == GemvEpilogue::accumulate) {
    *out = from_f32<OutT>(to_f32(*out) + to_f32(from_f32<OutT>(v)));
  } else {
    static_assert(kEpi == GemvEpilogue::gated);
    const float gate = to_f32(from_f32<OutT>(v)), up = to_f32(from_f32<OutT>(v2));
    *out = from_f32<OutT>(gate / (1.0f + __expf(-gate)) * up);
  }
}

// Input rows into shared memory, `row_pieces` 16-byte pieces apart (a stride wider than a row
// lets the MMA GEMV read a column of rows without bank conflicts), by all kThreads threads of
// the block: as they are (stage_rows), or RMS-normalized as the unfused rmsnorm does it,
// h = T((x * inv_rms) * w) (stage_normalized: x read from global memory once, the squares
// summed on the way in, then normalized in place). n <= kMaxRows; a constant n unrolls.
template <typename T, int kThreads>
__device__ __forceinline__ void stage_rows(const T* x, int64_t x_stride, int n, int k, uint4* sh,
                                           int row_pieces) {
  const int nv = k / 8;
#pragma unroll
  for (int r = 0; r < n; ++r)
    for (int c = (int)threadIdx.x; c < nv; c += kThreads)
      sh[r * row_pieces + c] = __ldg(reinterpret_cast<const uint4*>(x + r * x_stride) + c);
  __syncthreads();
}

// The barrier stage_normalized waits at: the block's by default, or one that only the
// kThreads staging threads reach.
struct BlockBarrier {
  __device__ void operator()() const { __syncthreads(); }
};

template <typename T, int kThreads, int kMaxRows, typename Barrier = BlockBarrier>
__device__ __forceinline__ void stage_normalized(const T* x, int64_t x_stride, int n, int k,
                                                 const float* norm, float eps, uint4* sh,
                                                 int row_pieces, Barrier sync = {}) {
  constexpr int kWarpsHere = kThreads / 32;
  __shared__ float partial[kWarpsHere][kMaxRows];
  __shared__ float inv_rms[kMaxRows];
  const int nv = k / 8, warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < n; ++r) {
    float ss = 0.0f;
    for (int c = (int)threadIdx.x; c < nv; c += kThreads) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(x + r * x_stride) + c);
      sh[r * row_pieces + c] = v;
      float f[8];
      unpack8<T>(v, f);
#pragma unroll
      for (int j = 0; j < 8; ++j) ss = fmaf(f[j], f[j], ss);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) partial[warp][r] = ss;
  }
  sync();
  if ((int)threadIdx.x < n) {
    float ss = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsHere; ++w) ss += partial[w][threadIdx.x];
    inv_rms[threadIdx.x] = rsqrtf(ss / (float)k + eps);
  }
  sync();
#pragma unroll
  for (int r = 0; r < n; ++r) {
    const float inv = inv_rms[r];
    for (int c = (int)threadIdx.x; c < nv; c += kThreads) {
      float f[8];
      unpack8<T>(sh[r * row_pieces + c], f);  // this thread's own store above: no barrier needed
      const float4 w0 = __ldg(reinterpret_cast<const float4*>(norm) + 2 * c);
      const float4 w1 = __ldg(reinterpret_cast<const float4*>(norm) + 2 * c + 1);
      const float w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) f[j] = f[j] * inv * w[j];
      sh[r * row_pieces + c] = pack8<T>(f);
    }
  }
  sync();
}

}  // namespace infercept::cuda
