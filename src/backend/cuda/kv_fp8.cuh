// The fp8 (e4m3) KV cache on the device: the element type the attention kernels are templated
// on, where a token's codes and scales lie in a block (KvGeometry's layout: per block,
// [block_size, n_kv_heads, head_dim] codes, then [block_size, n_kv_heads] f32 scales), and
// codes to floats. Quantization is core/fp8.h's, the CPU oracle's own definitions.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_util.h"

namespace infercept::cuda {

// One code of an fp8 cache, as the attention kernels' KV element: one byte, so a 16-byte load
// carries 16 elements (twice bf16's); its value is the code times its token and head's scale.
struct Fp8E4m3 {
  uint8_t code;
};
template <typename KV>
inline constexpr bool kIsFp8 = std::is_same_v<KV, Fp8E4m3>;

// Byte offsets within one layer's K (or V) plane of an fp8 cache.
struct Fp8Layout {
  int64_t block_bytes;  // KvGeometry::bytes_per_block_per_layer()
  int row_bytes;        // one token's codes, all heads: n_kv_heads * head_dim
  int scales_at;        // where a block's scales start: block_size * row_bytes
  int n_kv_heads, head_dim;

  __host__ __device__ Fp8Layout(int block_size, int n_kv_heads, int head_dim)
      : block_bytes((int64_t)block_size * n_kv_heads * (head_dim + (int)sizeof(float))),
        row_bytes(n_kv_heads * head_dim),
        scales_at(block_size * n_kv_heads * head_dim),
        n_kv_heads(n_kv_heads),
        head_dim(head_dim) {}
  // Head `head`'s codes of row `row` of block `block` (16-byte aligned where head_dim and the
  // block are multiples of 16, which allocate_kv_storage requires).
  __device__ __forceinline__ int64_t codes(int64_t block, int row, int head) const {
    return block * block_bytes + (int64_t)row * row_bytes + (int64_t)head * head_dim;
  }
  __device__ __forceinline__ int64_t scale(int64_t block, int row, int head) const {
    return block * block_bytes + scales_at + (int64_t)(row * n_kv_heads + head) * 4;
  }
};

// Two codes (the first in the low byte) to floats: e4m3 -> f16 is exact (every e4m3 value is
// an f16; one cvt on sm_89 and later), f16 -> f32 too, so these are fp8_e4m3_to_f32's values.
__device__ __forceinline__ float2 fp8x2_to_float2(uint32_t two_codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two_codes, __NV_E4M3);
  return __half22float2(__half2(h));
}
// Four codes (byte i is code i) to floats.
__device__ __forceinline__ void fp8x4_to_f32(uint32_t w, float (&f)[4]) {
  const float2 lo = fp8x2_to_float2(w & 0xffffu), hi = fp8x2_to_float2(w >> 16);
  f[0] = lo.x;
  f[1] = lo.y;
  f[2] = hi.x;
  f[3] = hi.y;
}

// 4 bytes global -> shared (a scale); src-size 0 zero-fills (src must still be a valid address).
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool pred) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(pred ? 4 : 0)
               : "memory");
}

}  // namespace infercept::cuda
