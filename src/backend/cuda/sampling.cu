#include "backend/cuda/sampling.h"

#include <cfloat>

#include "backend/cuda/cuda_util.h"

namespace infercept::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr uint32_t kOneBits = 0x3f800000u;  // 1.0f: the largest weight

// Block-wide sum; every thread gets the result. `red` holds kWarps floats.
template <typename V>
__device__ V block_sum(V v, V* red) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  __syncthreads();  // red may still be read by the previous call
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  V t = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t += red[w];
  return t;
}

__device__ float block_max(float v, float* red) {
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float t = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t = fmaxf(t, red[w]);
  return t;
}

// Weights of bits >= b: their count (as a float, exact below 2^24) and their mass.
__device__ float2 at_least(const float* w, int64_t cols, uint32_t b, float* red) {
  float n = 0.0f, m = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const float x = w[c];
    if (__float_as_uint(x) >= b && x > 0.0f) {
      n += 1.0f;
      m += x;
    }
  }
  const float tn = block_sum(n, red);
  const float tm = block_sum(m, red + kWarps);
  return make_float2(tn, tm);
}

// The largest b in [lo, kOneBits] whose weights >= b reach `target` (count or mass, by
// `use_mass`); lo itself must reach it.
__device__ uint32_t largest_cut(const float* w, int64_t cols, uint32_t lo, float target,
                                bool use_mass, float* red) {
  uint32_t hi = kOneBits;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    const float2 r = at_least(w, cols, mid, red);
    if ((use_mass ? r.y : r.x) >= target)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(float* logits, int64_t cols, int64_t stride, const DeviceSampleRow* params,
                  int32_t* out) {
  __shared__ float red[2 * kWarps];
  __shared__ float scan[kWarps];
  __shared__ int32_t found;
  float* w = logits + (int64_t)blockIdx.x * stride;
  const DeviceSampleRow p = params[blockIdx.x];

  // Max logit (NaN never wins: it compares false) and, for greedy rows, its lowest index.
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) mx = fmaxf(mx, w[c]);
  mx = block_max(mx, red);
  if (threadIdx.x == 0) found = INT32_MAX;
  __syncthreads();
  if (p.greedy || mx == -INFINITY) {  // all masked: the host sampler returns its first too
    for (int64_t c = threadIdx.x; c < cols; c += kThreads)
      if (w[c] == mx) {
        atomicMin(&found, (int32_t)c);
        break;  // strided ascending: the first hit is this thread's lowest
      }
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = found == INT32_MAX ? 0 : found;
    return;
  }
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const float l = w[c];
    w[c] = l == l ? __expf((l - mx) * p.inv_temperature) : 0.0f;  // NaN -> weight 0
  }
  __syncthreads();  // the best weight is now exp(0) = 1 exactly
  // top_k, then top_p over what it kept, then min_p.
  uint32_t cut = 1;  // bits >= 1: every positive weight
  if (p.top_k > 0 && p.top_k < cols) cut = largest_cut(w, cols, cut, (float)p.top_k, false, red);
  if (p.top_p < 1.0f) {
    const float kept = at_least(w, cols, cut, red).y;
    cut = largest_cut(w, cols, cut, p.top_p * kept, true, red);
  }
  if (p.min_p > 0.0f) cut = max(cut, __float_as_uint(p.min_p));
  const float total = at_least(w, cols, cut, red).y;
  const float target = p.u * total;

  // Inverse CDF in id order, a tile of kThreads ids at a time: a block scan per tile.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float run = 0.0f;
  for (int64_t base = 0; base < cols; base += kThreads) {
    const int64_t c = base + threadIdx.x;
    const float x = c < cols ? w[c] : 0.0f;
    const float v = __float_as_uint(x) >= cut && x > 0.0f ? x : 0.0f;
    float incl = v;
    for (int off = 1; off < 32; off *= 2) {
      const float o = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += o;
    }
    if (lane == 31) scan[warp] = incl;
    __syncthreads();
    float before = 0.0f, tile = 0.0f;
    for (int i = 0; i < kWarps; ++i) {
      if (i < warp) before += scan[i];
      tile += scan[i];
    }
    incl += before + run;
    // The first kept id whose cumulative mass passes the target.
    if (v > 0.0f && incl > target) atomicMin(&found, (int32_t)c);
    __syncthreads();
    if (found != INT32_MAX) break;
    run += tile;
    __syncthreads();  // scan[] is rewritten by the next tile
  }
  if (threadIdx.x == 0) {
    if (found != INT32_MAX) {
      out[blockIdx.x] = found;
    } else {  // u landed on the rounding slack at the very end: the last kept id
      int32_t last = 0;
      for (int64_t c = cols - 1; c >= 0; --c) {
        const float x = w[c];
        if (__float_as_uint(x) >= cut && x > 0.0f) {
          last = (int32_t)c;
          break;
        }
      }
      out[blockIdx.x] = last;
    }
  }
}

__global__ void mask_rows_kernel(float* logits, int64_t cols, int64_t stride, const int32_t* rows,
                                 const uint64_t* masks, int64_t words) {
  const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (id >= cols) return;
  const int64_t w = id >> 6;
  const uint64_t bits = w < words ? masks[(int64_t)blockIdx.y * words + w] : 0;
  if (((bits >> (id & 63)) & 1) == 0) logits[(int64_t)rows[blockIdx.y] * stride + id] = -INFINITY;
}

}  // namespace

void mask_rows(float* logits, int64_t cols, int64_t stride, const int32_t* rows, int64_t n_rows,
               const uint64_t* masks, int64_t words, cudaStream_t s) {
  if (n_rows == 0 || cols == 0) return;
  CHECK(n_rows <= 65535);
  const dim3 grid((unsigned)((cols + kThreads - 1) / kThreads), (unsigned)n_rows);
  mask_rows_kernel<<<grid, kThreads, 0, s>>>(logits, cols, stride, rows, masks, words);
  CUDA_CHECK_LAUNCH();
}

void sample_rows(float* logits, int64_t rows, int64_t cols, int64_t stride,
                 const DeviceSampleRow* params, int32_t* out, cudaStream_t s) {
  if (rows == 0) return;
  sample_kernel<<<(unsigned)rows, kThreads, 0, s>>>(logits, cols, stride, params, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace infercept::cuda
