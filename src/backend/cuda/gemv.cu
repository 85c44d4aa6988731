#include "backend/cuda/gemv.h"

#include "backend/cuda/cuda_util.h"
#include "core/check.h"

namespace infercept::cuda {
namespace {

constexpr int kWarps = 8;  // per block; one output feature per warp

// 16 bytes of weights, read once per step: bypass L1 (it keeps the shared input rows).
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

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

template <typename T, int NR>
__device__ __forceinline__ void dot_chunk(const uint4& wv, const T* x, int64_t xs, int c,
                                          float acc[NR]) {
  float wf[8];
  unpack8<T>(wv, wf);
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    float xf[8];
    unpack8<T>(__ldg(reinterpret_cast<const uint4*>(x + r * xs) + c), xf);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[r] = fmaf(wf[j], xf[j], acc[r]);
  }
}

// One warp per output feature: its lanes stream the weight row in 16-byte pieces, four in
// flight per lane, and keep one f32 sum per input row; a butterfly reduces them.
template <typename T, typename OutT, int NR>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const T* __restrict__ x, int64_t xs, const T* __restrict__ w, int m, int k,
                OutT* __restrict__ out, int64_t os) {
  const int row = blockIdx.x * kWarps + (int)threadIdx.x / 32;
  const int lane = (int)threadIdx.x % 32;
  if (row >= m) return;
  const uint4* wr = reinterpret_cast<const uint4*>(w + (int64_t)row * k);
  const int nv = k / 8;
  float acc[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) acc[r] = 0.0f;
  int c = lane;
  for (; c + 96 < nv; c += 128) {
    const uint4 w0 = load_stream(wr + c), w1 = load_stream(wr + c + 32),
                w2 = load_stream(wr + c + 64), w3 = load_stream(wr + c + 96);
    dot_chunk<T, NR>(w0, x, xs, c, acc);
    dot_chunk<T, NR>(w1, x, xs, c + 32, acc);
    dot_chunk<T, NR>(w2, x, xs, c + 64, acc);
    dot_chunk<T, NR>(w3, x, xs, c + 96, acc);
  }
  for (; c < nv; c += 32) dot_chunk<T, NR>(load_stream(wr + c), x, xs, c, acc);
#pragma unroll
  for (int r = 0; r < NR; ++r) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
  }
  if (lane < NR) {
    float v = acc[0];
#pragma unroll
    for (int r = 1; r < NR; ++r)
      if (lane == r) v = acc[r];
    out[(int64_t)lane * os + row] = from_f32<OutT>(v);
  }
}

template <typename T, typename OutT>
void launch_rows(const T* x, int64_t xs, const T* w, int n, int m, int k, OutT* out,
                 int64_t os, cudaStream_t s) {
  const dim3 grid((unsigned)ceil_div(m, kWarps)), block(kWarps * 32);
  switch (n) {
#define INFERCEPT_GEMV_CASE(N) \
  case N: gemv_kernel<T, OutT, N><<<grid, block, 0, s>>>(x, xs, w, m, k, out, os); break;
    INFERCEPT_GEMV_CASE(1)
    INFERCEPT_GEMV_CASE(2)
    INFERCEPT_GEMV_CASE(3)
    INFERCEPT_GEMV_CASE(4)
    INFERCEPT_GEMV_CASE(5)
    INFERCEPT_GEMV_CASE(6)
    INFERCEPT_GEMV_CASE(7)
    INFERCEPT_GEMV_CASE(8)
#undef INFERCEPT_GEMV_CASE
    default: CHECK_MSG(false, "gemv: too many rows");
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_out(const void* x, int64_t xs, const void* w, int n, int m, int k, void* out,
                int64_t os, DType out_dtype, cudaStream_t s) {
  if (out_dtype == DType::f32)
    launch_rows<T, float>(static_cast<const T*>(x), xs, static_cast<const T*>(w), n, m, k,
                          static_cast<float*>(out), os, s);
  else
    launch_rows<T, T>(static_cast<const T*>(x), xs, static_cast<const T*>(w), n, m, k,
                      static_cast<T*>(out), os, s);
}

}  // namespace

bool gemv_fits(int64_t n, int64_t k, const void* x, int64_t x_stride, const void* w,
               DType in_dtype, DType out_dtype) {
  const bool half = in_dtype == DType::bf16 || in_dtype == DType::f16;
  return n >= 1 && n <= kGemvMaxRows && half && (out_dtype == in_dtype || out_dtype == DType::f32) &&
         k % 8 == 0 && x_stride % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0 && k / 8 < (int64_t)1 << 30;
}

void gemv(const void* x, int64_t x_stride, DType in_dtype, const void* w, int64_t n, int64_t m,
          int64_t k, void* out, int64_t out_stride, DType out_dtype, cudaStream_t s) {
  CHECK(gemv_fits(n, k, x, x_stride, w, in_dtype, out_dtype));
  if (in_dtype == DType::bf16)
    launch_out<__nv_bfloat16>(x, x_stride, w, (int)n, (int)m, (int)k, out, out_stride, out_dtype, s);
  else
    launch_out<__half>(x, x_stride, w, (int)n, (int)m, (int)k, out, out_stride, out_dtype, s);
}

}  // namespace infercept::cuda
