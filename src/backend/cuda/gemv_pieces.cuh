// The 16-byte pieces the GEMV kernels (gemv.cu, gemv_bulk.cu) stream: eight bf16 or f16
// values unpacked to f32, packed back (rounded as from_f32), and the dot product of two pieces
// summed in element order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/cuda_util.h"

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

}  // namespace infercept::cuda
