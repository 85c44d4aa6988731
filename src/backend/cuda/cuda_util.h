// Small helpers shared by the CUDA backend's files: error checks and element conversion.
// CUDA errors inside a step are bugs or a lost device, not user input: they abort with the
// call and location (CUDA_CHECK); allocation at start-up returns errors as values instead.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#define CUDA_CHECK(expr)                                                       \
  do {                                                                         \
    cudaError_t err_ = (expr);                                                 \
    if (err_ != cudaSuccess) {                                                 \
      std::fprintf(stderr, "%s:%d: CUDA error %s in %s\n", __FILE__, __LINE__, \
                   cudaGetErrorString(err_), #expr);                           \
      std::abort();                                                            \
    }                                                                          \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace infercept::cuda {

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float to_f32(__half x) {
  return __half2float(x);
}

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half(x);
}

// Programmatic dependent launch (sm_90+). A kernel launched with the programmatic-
// serialization attribute may start before the previous kernel in the stream has finished:
// it must call pdl_wait() before reading anything that kernel writes (or writing anything it
// reads). pdl_launch_dependents() lets such a dependent be scheduled as this kernel's blocks
// retire; it is harmless when no dependent waits. Both are no-ops on older architectures.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// kernel<<<grid, block, smem, s>>>(args...), as a programmatic dependent of the previous
// kernel in the stream when `programmatic` (the kernel must pdl_wait() as described above).
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                   bool programmatic, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = programmatic ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// How load_stream asks L2 for the bytes (Hint; measured in gemv_lab and the engine, docs/PERF.md
// 4.5s: neither hint helps, so the engine uses 0): 0 none; 1 the 256-byte L2 prefetch size (the
// L2 fetches the whole 256-byte stretch at the first miss: reads 4-5% slower, the 7B step 4%);
// 2 evict-first (the stream leaves L2 to what is reused: no change); 3 both.
//
// 16 bytes read once (weights streamed by a product): past L1, which keeps what is reused
// (a GEMV's staged input rows).
template <int Hint = 0>
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  static_assert(Hint >= 0 && Hint <= 3, "load_stream: hint 0..3");
  uint4 v;
  if constexpr (Hint == 0) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else if constexpr (Hint == 1) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else {
    uint64_t policy;  // not volatile: the same policy for every load, created once
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    if constexpr (Hint == 2)
      asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "l"(p), "l"(policy));
    else
      asm volatile(
          "ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], "
          "%5;"
          : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
          : "l"(p), "l"(policy));
  }
  return v;
}

// A counter another block (or kernel) publishes with a fence and an atomic: a load that no
// later load of this thread may pass, from L2 (gpu scope).
__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
#else
  v = *(volatile const int*)p;
  __threadfence();
#endif
  return v;
}

// Adds v to a counter that publishes this thread's earlier writes (and those ordered before
// them, e.g. by a block barrier): a release, lighter than __threadfence() (a sequentially
// consistent fence) followed by an atomic.
__device__ __forceinline__ void red_release_add(int* p, int v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __threadfence();
  atomicAdd(p, v);
#endif
}

// RoPE's rotation of the pair (x0, x1) at frequency i of a head_dim-wide head at position
// pos: theta = pos * base^(-2i/d) / freq_factors[i] (llama3's divisors, or none). The one
// definition the RoPE store kernels (kernels.cu) and the fused decode attention
// (attention_decode.cuh) share, so the fused and the unfused paths rotate alike.
// rope_angle and rope_apply are its two halves, for kernels that rotate many heads of one
// position and compute each frequency's sine and cosine once (rope_store_vec_kernel).
__device__ __forceinline__ void rope_angle(float pos, int i, int head_dim, float theta_base,
                                           const float* freq_factors, float& sn, float& cs) {
  float inv_freq = powf(theta_base, -2.0f * (float)i / (float)head_dim);
  if (freq_factors != nullptr) inv_freq /= freq_factors[i];
  sincosf(pos * inv_freq, &sn, &cs);
}
__device__ __forceinline__ void rope_apply(float sn, float cs, float x0, float x1, float& y0,
                                           float& y1) {
  y0 = x0 * cs - x1 * sn;
  y1 = x0 * sn + x1 * cs;
}
__device__ __forceinline__ void rope_rotate(float pos, int i, int head_dim, float theta_base,
                                            const float* freq_factors, float x0, float x1,
                                            float& y0, float& y1) {
  float sn, cs;
  rope_angle(pos, i, head_dim, theta_base, freq_factors, sn, cs);
  rope_apply(sn, cs, x0, x1, y0, y1);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; src-size 0 zero-fills (src must still be a valid address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(pred ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

inline int ceil_div(long long a, long long b) {
  return (int)((a + b - 1) / b);
}

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// An attribute of the current device.
inline int device_attribute(cudaDeviceAttr attr) {
  int device = 0, v = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, device));
  return v;
}

// The current device's multiprocessor count and compute capability major (asked once).
inline int device_multiprocessors() {
  static const int n = device_attribute(cudaDevAttrMultiProcessorCount);
  return n;
}
inline int device_compute_major() {
  static const int v = device_attribute(cudaDevAttrComputeCapabilityMajor);
  return v;
}

// The grid of a persistent kernel: as many blocks of `threads` as are resident at once with
// `smem` bytes of dynamic shared memory, remembered per kernel and size (a kernel staging rows
// of different widths would otherwise ask at every launch of an eager step). A kernel is let
// use up to `max_dynamic` bytes at its first launch, whatever that launch needs: the 48 KB
// one gets without opting in bounds its static buffers and the dynamic bytes together.
inline int resident_grid(const void* kernel, int threads, size_t smem, size_t max_dynamic) {
  static std::mutex mu;  // engines on other threads may launch too
  static std::map<const void*, std::map<size_t, int>> grids;
  std::lock_guard<std::mutex> lock(mu);
  auto kit = grids.find(kernel);
  if (kit == grids.end()) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)max_dynamic));
    kit = grids.emplace(kernel, std::map<size_t, int>{}).first;
  }
  auto it = kit->second.find(smem);
  if (it == kit->second.end()) {
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    it = kit->second.emplace(smem, std::max(1, per_sm) * device_multiprocessors()).first;
  }
  return it->second;
}

}  // namespace infercept::cuda
