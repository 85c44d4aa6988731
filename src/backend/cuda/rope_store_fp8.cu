// RoPE + KV store into an fp8 (e4m3) cache: rope_store_kv's rotation, then each stored head of
// the row quantized on its own, with the scale its largest magnitude / 448 (KvGeometry says why a
// scale per token and head). The rotated k is rounded to the activation type T first, as the
// bf16 path stores it, and that value is what is quantized, by core/fp8.h: for the same T values
// the codes and scales are the CPU backend's bits (tests/gpu/test_cuda_ops.cpp holds them to it).

#include <algorithm>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/launch_mode.h"
#include "core/check.h"
#include "core/fp8.h"

namespace infercept::cuda {

namespace {

constexpr int kWarps = 4;

// Block (r, g) takes units [upb g, upb g + upb) of row r, a warp a unit: the row's query heads
// (rotated in place), then its k heads (rotated in place and stored), then its v heads (stored).
// A warp's lanes take the head's rotation pairs (i, i + half) or (2i, 2i + 1), i = lane + 32 n;
// the quantizing pass reads back only what the same lane wrote. Each frequency's sine and
// cosine are computed once a block (rope_angle, rope_apply: the other RoPE kernels' bits).
// Launched as a programmatic dependent, as rope_store_kernel: the decode attention after it may
// start reading the cached context while this runs.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    rope_store_fp8_kernel(RopeStoreArgs a, int units_per_block) {
  pdl_launch_dependents();
  extern __shared__ float2 angle[];  // [half]: (sin, cos) of frequency i at this row's position
  pdl_wait();  // everything below reads the previous kernels' outputs (the step's uploads too)
  const int64_t r = blockIdx.x;
  const int hd = a.head_dim, half = hd / 2;
  const float pos = (float)a.positions[r];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float sn, cs;
    rope_angle(pos, i, hd, a.theta_base, a.freq_factors, sn, cs);
    angle[i] = make_float2(sn, cs);
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int units = a.n_heads + 2 * a.n_kv_heads;
  const int u0 = (int)blockIdx.y * units_per_block, u1 = min(units, u0 + units_per_block);
  const Fp8Layout lay(a.block_size, a.n_kv_heads, hd);
  const int32_t slot = a.slots[r];
  const int64_t block = slot / a.block_size;
  const int row = slot % a.block_size;
  T* q = static_cast<T*>(a.q.data) + r * a.q.stride;
  T* k = static_cast<T*>(a.k.data) + r * a.k.stride;
  const T* v = static_cast<const T*>(a.v.data) + r * a.v.stride;
  for (int u = u0 + warp; u < u1; u += kWarps) {  // warp-uniform
    const bool is_q = u < a.n_heads, is_v = u >= a.n_heads + a.n_kv_heads;
    const int kvh = is_v ? u - a.n_heads - a.n_kv_heads : u - a.n_heads;
    T* rotated = is_v ? nullptr : is_q ? q + (int64_t)u * hd : k + (int64_t)kvh * hd;
    const T* x = is_v ? v + (int64_t)kvh * hd : rotated;
    float amax = 0.0f;
    for (int i = lane; i < half; i += 32) {
      const int i0 = a.neox ? i : 2 * i, i1 = a.neox ? i + half : 2 * i + 1;
      float y0 = to_f32(x[i0]), y1 = to_f32(x[i1]);
      if (rotated != nullptr) {
        const float2 sc = angle[i];
        rope_apply(sc.x, sc.y, y0, y1, y0, y1);
        const T t0 = from_f32<T>(y0), t1 = from_f32<T>(y1);
        rotated[i0] = t0;
        rotated[i1] = t1;
        y0 = to_f32(t0);
        y1 = to_f32(t1);
      }
      amax = fmaxf(amax, fmaxf(fabsf(y0), fabsf(y1)));
    }
    if (is_q) continue;
    // The head's largest magnitude over the warp (fmaxf, like the CPU's std::max, passes over
    // a NaN), so every lane holds the scale the CPU computes.
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, o));
    const float scale = fp8_e4m3_scale(amax);
    uint8_t* plane = static_cast<uint8_t*>(is_v ? a.v_cache : a.k_cache);
    uint8_t* codes = plane + lay.codes(block, row, kvh);
    for (int i = lane; i < half; i += 32) {
      const int i0 = a.neox ? i : 2 * i, i1 = a.neox ? i + half : 2 * i + 1;
      codes[i0] = fp8_e4m3_quantize(to_f32(x[i0]), scale);
      codes[i1] = fp8_e4m3_quantize(to_f32(x[i1]), scale);
    }
    if (lane == 0) *reinterpret_cast<float*>(plane + lay.scale(block, row, kvh)) = scale;
  }
}

}  // namespace

void rope_store_kv_fp8(const RopeStoreArgs& a, cudaStream_t s) {
  if (a.q.rows == 0) return;
  CHECK(a.kv_dtype == DType::fp8_e4m3 && a.slots != nullptr && a.block_size > 0);
  CHECK(a.head_dim % 2 == 0 && a.q.dtype == a.k.dtype && a.k.dtype == a.v.dtype);
  // Many rows (a prefill): 16 heads a block share their angles; few rows (decode): 4 heads a
  // block keep a row spread over the multiprocessors (rope_store_kv's choice).
  const int units = a.n_heads + 2 * a.n_kv_heads, upb = a.q.rows >= 64 ? 16 : kWarps;
  const dim3 grid((unsigned)a.q.rows, (unsigned)ceil_div(std::max(1, units), upb));
  const size_t smem = (size_t)(a.head_dim / 2) * sizeof(float2);
  if (a.q.dtype == DType::bf16) {
    launch_kernel(rope_store_fp8_kernel<__nv_bfloat16>, grid, dim3(kWarps * 32), smem, s,
                  programmatic_launch(), a, upb);
  } else {
    CHECK(a.q.dtype == DType::f16);
    launch_kernel(rope_store_fp8_kernel<__half>, grid, dim3(kWarps * 32), smem, s,
                  programmatic_launch(), a, upb);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace infercept::cuda
