// Hopper's warpgroup tensor-core instructions (wgmma, PTX ISA 8.0+, sm_90a only): the shared-
// memory matrix descriptor, the fences and the m64n128k16 products the prefill attention is
// built from (attention_prefill_wgmma.cu). Every function here must be called by all 128
// threads of a warpgroup together. Compiled only where __CUDA_ARCH_FEAT_SM90_ALL is defined
// (the sm_90a target); elsewhere the callers do not reach them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace infercept::cuda::wgmma {

// A shared-memory operand in the 128-byte swizzle layout: 8-row groups of 128-byte rows (64
// 16-bit elements), the 16-byte chunk c of row r stored at chunk c ^ (r % 8), each group's
// 1,024 bytes aligned to 1,024. lbo / sbo: the leading / stride byte offsets (the PTX ISA's
// matrix-descriptor fields; for a K-major operand sbo is the step between 8-row groups and
// lbo is unused, for an MN-major one lbo is the step between 64-element atoms along M or N).
__device__ __forceinline__ uint64_t desc_sw128(uint32_t smem_byte_addr, uint32_t lbo,
                                               uint32_t sbo) {
  uint64_t d = 0;
  d |= (uint64_t)((smem_byte_addr & 0x3FFFFu) >> 4);
  d |= (uint64_t)((lbo >> 4) & 0x3FFFu) << 16;
  d |= (uint64_t)((sbo >> 4) & 0x3FFFu) << 32;
  d |= (uint64_t)1 << 62;  // layout type: 128-byte swizzle
  return d;
}

__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared memory written through the generic proxy (st.shared, cp.async) made visible to the
// async proxy that wgmma reads it through; then a barrier.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving reads or writes of accumulator registers across a wait.
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The 64 f32 accumulators of an m64n128 product: their place in the instruction (%0..%63) and
// their asm operands.
#define INFERCEPT_WGMMA_D64                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define INFERCEPT_WGMMA_D64_OPERANDS                                                              \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
// A from shared memory; operands %64 desc_a, %65 desc_b, %66 scale_d, %67 trans_b.
#define INFERCEPT_WGMMA_SS(TY)                                                         \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                     \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " INFERCEPT_WGMMA_D64 \
      ", %64, %65, p, 1, 1, 0, %67;\n}\n"                                              \
      : INFERCEPT_WGMMA_D64_OPERANDS                                                   \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TransB))
// A from registers; operands %64..%67 its fragment, %68 desc_b, %69 scale_d, %70 trans_b.
#define INFERCEPT_WGMMA_RS(TY)                                                         \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                     \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " INFERCEPT_WGMMA_D64 \
      ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"                                \
      : INFERCEPT_WGMMA_D64_OPERANDS                                                   \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TransB))

// d[64] (+)= A B for a 64 x 128 x 16 product: A from shared memory (K-major), B from shared
// memory, K-major (trans_b 0) or N-major (1). scale_d 0 ignores d's old values.
template <typename T, int TransB>
__device__ __forceinline__ void mma_m64n128k16_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                  int scale_d) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    INFERCEPT_WGMMA_SS("bf16");
  else
    INFERCEPT_WGMMA_SS("f16");
}

// d[64] (+)= A B for a 64 x 128 x 16 product: A from registers (a: the 16 x 16 fragment of each
// warp's 16 rows, laid out as mma.sync m16n8k16's A), B from shared memory, K-major (trans_b
// 0) or N-major (1).
template <typename T, int TransB>
__device__ __forceinline__ void mma_m64n128k16_rs(float (&d)[64], const uint32_t (&a)[4],
                                                  uint64_t desc_b, int scale_d) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    INFERCEPT_WGMMA_RS("bf16");
  else
    INFERCEPT_WGMMA_RS("f16");
}

#undef INFERCEPT_WGMMA_RS
#undef INFERCEPT_WGMMA_SS
#undef INFERCEPT_WGMMA_D64_OPERANDS
#undef INFERCEPT_WGMMA_D64

}  // namespace infercept::cuda::wgmma
