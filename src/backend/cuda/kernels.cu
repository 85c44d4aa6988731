#include "backend/cuda/kernels.h"

#include <algorithm>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gemv_pieces.cuh"
#include "backend/cuda/launch_mode.h"
#include "core/check.h"

namespace infercept::cuda {

namespace {

constexpr int kThreads = 256;

// One block per row. In 16-byte pieces where the row allows it: copied one element at a time
// (and without __restrict__, each load waited for the store before it), a 4,096-wide bf16
// row took 8.5 us, the whole of a batch-1 step's first kernel.
template <typename T>
__global__ void embed_kernel(const T* __restrict__ table, int64_t d,
                             const int32_t* __restrict__ tokens, T* __restrict__ out,
                             int64_t out_stride) {
  const int64_t r = blockIdx.x;
  const T* src = table + (int64_t)tokens[r] * d;
  T* dst = out + r * out_stride;
  constexpr int kVec = 16 / sizeof(T);
  if (d % kVec == 0 &&
      ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15) == 0) {
    const uint4* s4 = reinterpret_cast<const uint4*>(src);
    uint4* d4 = reinterpret_cast<uint4*>(dst);
    for (int64_t c = threadIdx.x; c < d / kVec; c += blockDim.x) d4[c] = s4[c];
    return;
  }
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) dst[c] = src[c];
}

__device__ float block_sum(float v) {
  __shared__ float warp_sums[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x / 32) ? warp_sums[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    if (lane == 0) warp_sums[0] = v;
  }
  __syncthreads();
  const float total = warp_sums[0];
  __syncthreads();
  return total;
}

// One block per row. With a residual, the row is residual + x rounded to T (what is stored
// as the new residual), and that rounded sum is normalized: the same value both ways.
template <typename T>
__global__ void rmsnorm_kernel(const T* x, int64_t xs, const float* w, float eps, T* out,
                               int64_t os, T* res, int64_t rs, int64_t d) {
  const int64_t r = blockIdx.x;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float v = to_f32(x[r * xs + c]);
    if (res != nullptr) {
      const T sum = from_f32<T>(to_f32(res[r * rs + c]) + v);
      res[r * rs + c] = sum;
      v = to_f32(sum);
    }
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / (float)d + eps);
  const T* src = res != nullptr ? res + r * rs : x + r * xs;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
    out[r * os + c] = from_f32<T>(to_f32(src[c]) * inv * w[c]);
}

// RMSNorm of every head_dim-wide slice of every row, in place (Qwen3's q/k norm): one warp a
// (row, head), its sum of squares by a shuffle reduction, f32 throughout, rounded to T once.
template <typename T>
__global__ void head_rmsnorm_kernel(T* x, int64_t xs, int64_t rows, int heads, int d,
                                    const float* __restrict__ w, float eps) {
  const int64_t item = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (item >= rows * heads) return;  // whole warps leave together
  const int lane = threadIdx.x % 32;
  T* v = x + (item / heads) * xs + (item % heads) * (int64_t)d;
  float ss = 0.0f;
  for (int c = lane; c < d; c += 32) {
    const float f = to_f32(v[c]);
    ss += f * f;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
  const float inv = rsqrtf(ss / (float)d + eps);
  for (int c = lane; c < d; c += 32) v[c] = from_f32<T>(to_f32(v[c]) * inv * w[c]);
}

// rmsnorm_kernel with the row moved in 16-byte pieces through shared memory: element by
// element, a prefill's 4,096 rows of 4,096 took 46 us, three times their bytes (docs/PERF.md
// 4.5s). The squares are summed from shared memory in rmsnorm_kernel's order (element c by
// thread c mod the block, then block_sum), so the bits are the element-wise kernel's.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_vec_kernel(const T* x, int64_t xs, const float* __restrict__ w, float eps, T* out,
                       int64_t os, T* res, int64_t rs, int d) {
  extern __shared__ uint4 row_sh[];  // the row normalized below: x, or the new residual
  const int64_t r = blockIdx.x;
  const int nv = d / 8;
  const uint4* x4 = reinterpret_cast<const uint4*>(x + r * xs);
  uint4* res4 = res != nullptr ? reinterpret_cast<uint4*>(res + r * rs) : nullptr;
  for (int c = (int)threadIdx.x; c < nv; c += kThreads) {
    uint4 v = x4[c];
    if (res4 != nullptr) {  // the new residual: residual + x rounded to T
      float f[8], g[8];
      unpack8<T>(v, f);
      unpack8<T>(res4[c], g);
#pragma unroll
      for (int j = 0; j < 8; ++j) f[j] = g[j] + f[j];
      v = pack8<T>(f);
      res4[c] = v;
    }
    row_sh[c] = v;
  }
  __syncthreads();
  const T* row = reinterpret_cast<const T*>(row_sh);
  float ss = 0.0f;
  for (int c = (int)threadIdx.x; c < d; c += kThreads) {
    const float v = to_f32(row[c]);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / (float)d + eps);
  uint4* o4 = reinterpret_cast<uint4*>(out + r * os);
  for (int c = (int)threadIdx.x; c < nv; c += kThreads) {
    float f[8];
    unpack8<T>(row_sh[c], f);
    const float4 w0 = __ldg(reinterpret_cast<const float4*>(w) + 2 * c);
    const float4 w1 = __ldg(reinterpret_cast<const float4*>(w) + 2 * c + 1);
    const float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = f[j] * inv * wv[j];
    o4[c] = pack8<T>(f);
  }
}

template <typename T>
__global__ void add_bias_kernel(T* out, int64_t os, const float* bias, int64_t cols) {
  const int64_t r = blockIdx.y;
  for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
    out[r * os + c] = from_f32<T>(to_f32(out[r * os + c]) + bias[c]);
}

template <typename T>
__global__ void silu_mul_kernel(const T* g, int64_t gs, const T* u, int64_t us, T* out, int64_t os,
                                int64_t cols) {
  const int64_t r = blockIdx.y;
  for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
    const float a = to_f32(g[r * gs + c]);
    out[r * os + c] = from_f32<T>(a / (1.0f + __expf(-a)) * to_f32(u[r * us + c]));
  }
}

// silu_mul_kernel in 16-byte pieces (the same arithmetic an element): element by element, a
// prefill's 4,096 x 11,008 took 200 us, three times its bytes (docs/PERF.md 4.5s).
template <typename T>
__global__ void silu_mul_vec_kernel(const T* g, int64_t gs, const T* u, int64_t us, T* out,
                                    int64_t os, int64_t pieces) {
  const int64_t r = blockIdx.y;
  const uint4* g4 = reinterpret_cast<const uint4*>(g + r * gs);
  const uint4* u4 = reinterpret_cast<const uint4*>(u + r * us);
  uint4* o4 = reinterpret_cast<uint4*>(out + r * os);
  for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < pieces;
       c += (int64_t)gridDim.x * blockDim.x) {
    float a[8], b[8];
    unpack8<T>(g4[c], a);
    unpack8<T>(u4[c], b);
#pragma unroll
    for (int j = 0; j < 8; ++j) a[j] = a[j] / (1.0f + __expf(-a[j])) * b[j];
    o4[c] = pack8<T>(a);
  }
}

template <typename T>
__global__ void add_kernel(T* a, int64_t as, const T* b, int64_t bs, int64_t cols) {
  const int64_t r = blockIdx.y;
  for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
    a[r * as + c] = from_f32<T>(to_f32(a[r * as + c]) + to_f32(b[r * bs + c]));
}

template <typename T>
__global__ void gather_kernel(const T* x, int64_t xs, const int32_t* rows, T* out, int64_t os,
                              int64_t cols) {
  const int64_t r = blockIdx.x;
  const T* src = x + (int64_t)rows[r] * xs;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[r * os + c] = src[c];
}

template <typename T>
__global__ void to_f32_kernel(const T* x, int64_t xs, float* dst, int64_t cols) {
  const int64_t r = blockIdx.y;
  for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
    dst[r * cols + c] = to_f32(x[r * xs + c]);
}

// One block of kArgmaxThreads per row. Each thread scans a strided share of 16-byte pieces
// (four floats, kArgmaxUnroll pieces in flight: a scalar loop of dependent compares was
// latency-bound, ~0.1 ms for the 128,256 logits of a llama3 row, PERF 4.5p), then a tree of
// (value, index) pairs keeps the larger value and, on equal values, the smaller index. A row
// whose start or length is not a whole number of pieces takes the scalar loop.
constexpr int kArgmaxThreads = 1024, kArgmaxUnroll = 4;
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(const float* x, int64_t xs, int64_t cols, int32_t* out) {
  __shared__ float best_v[kArgmaxThreads];
  __shared__ int32_t best_i[kArgmaxThreads];
  const float* row = x + (int64_t)blockIdx.x * xs;
  float bv = -INFINITY;
  int32_t bi = 0x7fffffff;
  // A thread's elements in ascending order, so the first maximum it sees has the lowest index.
  auto take = [&](float v, int64_t c) {
    if (v > bv) {
      bv = v;
      bi = (int32_t)c;
    }
  };
  if (reinterpret_cast<uintptr_t>(row) % 16 == 0 && cols % 4 == 0) {
    const float4* p = reinterpret_cast<const float4*>(row);
    const int64_t pieces = cols / 4, step = (int64_t)kArgmaxThreads * kArgmaxUnroll;
    for (int64_t c0 = threadIdx.x; c0 < pieces; c0 += step) {
      float4 v[kArgmaxUnroll];
#pragma unroll
      for (int u = 0; u < kArgmaxUnroll; ++u) {
        const int64_t c = c0 + (int64_t)u * kArgmaxThreads;
        v[u] = c < pieces ? __ldg(p + c) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      }
#pragma unroll
      for (int u = 0; u < kArgmaxUnroll; ++u) {
        const int64_t c = (c0 + (int64_t)u * kArgmaxThreads) * 4;
        take(v[u].x, c);
        take(v[u].y, c + 1);
        take(v[u].z, c + 2);
        take(v[u].w, c + 3);
      }
    }
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) take(row[c], c);
  }
  best_v[threadIdx.x] = bv;
  best_i[threadIdx.x] = bi;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if ((int)threadIdx.x < stride) {
      const float ov = best_v[threadIdx.x + stride];
      const int32_t oi = best_i[threadIdx.x + stride];
      if (ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < best_i[threadIdx.x])) {
        best_v[threadIdx.x] = ov;
        best_i[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = best_i[0] == 0x7fffffff ? 0 : best_i[0];
}

// Heads rotated by one block. A block per row alone left a batch-1 step with one busy
// multiprocessor doing 4,096 sincos pairs (40 us a layer on a 7B shape); a row now spreads
// over (q + k heads) / 4 blocks.
constexpr int kRopeHeadsPerBlock = 4;

// Row r's q and k (rotated in place), its v, and its K and V cache slots (null: rope only).
template <typename T, typename KV>
struct RopeRow {
  T* q;
  T* k;
  const T* v;
  KV* kc;
  KV* vc;
  int kv_width;
};
template <typename T, typename KV>
__device__ __forceinline__ RopeRow<T, KV> rope_row(const RopeStoreArgs& a, int64_t r) {
  const int kv_width = a.n_kv_heads * a.head_dim;
  const int64_t slot = a.slots ? (int64_t)a.slots[r] * kv_width : 0;
  return {static_cast<T*>(a.q.data) + r * a.q.stride,
          static_cast<T*>(a.k.data) + r * a.k.stride,
          static_cast<const T*>(a.v.data) + r * a.v.stride,
          a.slots ? static_cast<KV*>(a.k_cache) + slot : nullptr,
          a.slots ? static_cast<KV*>(a.v_cache) + slot : nullptr,
          kv_width};
}

// Block (r, g) rotates heads [4g, 4g + 4) of row r (q heads first, then k heads) in place,
// writes the rotated k heads to the row's cache slot, and copies its share of the row's v.
// theta_i = pos * base^(-2i/d) / freq_factor_i.
// Launched as a programmatic dependent: the decode attention after it may become resident
// and start reading the cached context while this runs (it waits for these stores itself).
template <typename T, typename KV>
__global__ void rope_store_kernel(RopeStoreArgs a) {
  pdl_launch_dependents();
  pdl_wait();  // everything below reads the previous kernels' outputs
  const int64_t r = blockIdx.x;
  const int half = a.head_dim / 2;
  const float pos = (float)a.positions[r];
  const RopeRow<T, KV> row = rope_row<T, KV>(a, r);
  const int head0 = (int)blockIdx.y * kRopeHeadsPerBlock;
  const int heads = min(kRopeHeadsPerBlock, a.n_heads + a.n_kv_heads - head0);
  for (int j = threadIdx.x; j < heads * half; j += blockDim.x) {
    const int head = head0 + j / half, i = j % half;
    const int i0 = a.neox ? i : 2 * i, i1 = a.neox ? i + half : 2 * i + 1;
    T* base =
        head < a.n_heads ? row.q + head * a.head_dim : row.k + (head - a.n_heads) * a.head_dim;
    float r0, r1;
    rope_rotate(pos, i, a.head_dim, a.theta_base, a.freq_factors, to_f32(base[i0]),
                to_f32(base[i1]), r0, r1);
    const T y0 = from_f32<T>(r0), y1 = from_f32<T>(r1);
    base[i0] = y0;
    base[i1] = y1;
    if (head >= a.n_heads && row.kc != nullptr) {
      const int off = (head - a.n_heads) * a.head_dim;
      row.kc[off + i0] = from_f32<KV>(to_f32(y0));
      row.kc[off + i1] = from_f32<KV>(to_f32(y1));
    }
  }
  if (row.vc != nullptr) {
    const int share = (row.kv_width + (int)gridDim.y - 1) / (int)gridDim.y;
    const int c1 = min(row.kv_width, ((int)blockIdx.y + 1) * share);
    for (int c = (int)blockIdx.y * share + (int)threadIdx.x; c < c1; c += blockDim.x)
      row.vc[c] = from_f32<KV>(to_f32(row.v[c]));
  }
}

// rope_store_kernel in 16-byte pieces, each frequency's sine and cosine computed once a block
// (in shared memory) for the block's heads: element by element, with powf and sincosf for every
// pair of every head, a prefill's 4,096 rows took 180 us a layer, 3.6 times their bytes
// (docs/PERF.md 4.5s). The same rotation (rope_angle, rope_apply) and roundings, so the same
// bits. Block (r, g) rotates heads [hpb g, hpb g + hpb) of row r; a thread takes 8 pairs: 8
// consecutive frequencies of a head (two pieces, i and i + d/2) when neox, else one piece of 4
// interleaved pairs (then 4 frequencies).
template <typename T, typename KV>
__global__ void rope_store_vec_kernel(RopeStoreArgs a, int heads_per_block) {
  pdl_launch_dependents();
  extern __shared__ float2 angle[];  // [half]: (sin, cos) of frequency i at this row's position
  pdl_wait();  // everything below reads the previous kernels' outputs (the step's uploads too)
  const int64_t r = blockIdx.x;
  const int half = a.head_dim / 2;
  const float pos = (float)a.positions[r];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float sn, cs;
    rope_angle(pos, i, a.head_dim, a.theta_base, a.freq_factors, sn, cs);
    angle[i] = make_float2(sn, cs);
  }
  __syncthreads();
  const RopeRow<T, KV> row = rope_row<T, KV>(a, r);
  const int head0 = (int)blockIdx.y * heads_per_block;
  const int heads = min(heads_per_block, a.n_heads + a.n_kv_heads - head0);
  const int per_head = a.neox ? half / 8 : a.head_dim / 8;  // a thread's units in a head
  for (int j = threadIdx.x; j < heads * per_head; j += blockDim.x) {
    const int head = head0 + j / per_head, unit = j % per_head;
    const bool is_k = head >= a.n_heads;
    T* base = is_k ? row.k + (head - a.n_heads) * a.head_dim : row.q + head * a.head_dim;
    KV* cache = is_k && row.kc != nullptr ? row.kc + (head - a.n_heads) * a.head_dim : nullptr;
    if (a.neox) {  // pairs (i, i + half), i = 8 unit .. 8 unit + 7
      uint4* p0 = reinterpret_cast<uint4*>(base + 8 * unit);
      uint4* p1 = reinterpret_cast<uint4*>(base + 8 * unit + half);
      float x0[8], x1[8];
      unpack8<T>(*p0, x0);
      unpack8<T>(*p1, x1);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float2 sc = angle[8 * unit + e];
        rope_apply(sc.x, sc.y, x0[e], x1[e], x0[e], x1[e]);
      }
      const uint4 y0 = pack8<T>(x0), y1 = pack8<T>(x1);
      *p0 = y0;
      *p1 = y1;
      if (cache != nullptr) {  // the T-rounded values, rounded to the cache's type
        unpack8<T>(y0, x0);
        unpack8<T>(y1, x1);
        *reinterpret_cast<uint4*>(cache + 8 * unit) = pack8<KV>(x0);
        *reinterpret_cast<uint4*>(cache + 8 * unit + half) = pack8<KV>(x1);
      }
    } else {  // pairs (2i, 2i + 1), i = 4 unit .. 4 unit + 3
      uint4* p = reinterpret_cast<uint4*>(base + 8 * unit);
      float x[8];
      unpack8<T>(*p, x);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 sc = angle[4 * unit + e];
        rope_apply(sc.x, sc.y, x[2 * e], x[2 * e + 1], x[2 * e], x[2 * e + 1]);
      }
      const uint4 y = pack8<T>(x);
      *p = y;
      if (cache != nullptr) {
        unpack8<T>(y, x);
        *reinterpret_cast<uint4*>(cache + 8 * unit) = pack8<KV>(x);
      }
    }
  }
  if (row.vc != nullptr) {  // this block's share of the row's v, in pieces
    const int pieces = row.kv_width / 8, share = (pieces + (int)gridDim.y - 1) / (int)gridDim.y;
    const int c1 = min(pieces, ((int)blockIdx.y + 1) * share);
    for (int c = (int)blockIdx.y * share + (int)threadIdx.x; c < c1; c += blockDim.x) {
      float f[8];
      unpack8<T>(reinterpret_cast<const uint4*>(row.v)[c], f);
      reinterpret_cast<uint4*>(row.vc)[c] = pack8<KV>(f);
    }
  }
}

__global__ void copy_chunks_kernel(const char* const* src_planes, char* const* dst_planes,
                                   const int32_t* src_idx, const int32_t* dst_idx, int n,
                                   size_t chunk_bytes) {
  const size_t vecs = chunk_bytes / 16;
  const int plane = blockIdx.y;
  for (int i = blockIdx.x; i < n; i += gridDim.x) {
    const uint4* s =
        reinterpret_cast<const uint4*>(src_planes[plane] + (size_t)src_idx[i] * chunk_bytes);
    uint4* d = reinterpret_cast<uint4*>(dst_planes[plane] + (size_t)dst_idx[i] * chunk_bytes);
    for (size_t v = threadIdx.x; v < vecs; v += blockDim.x) d[v] = s[v];
  }
}

// 16-byte pieces where both sides allow it, single bytes for the rest.
__global__ void copy_bytes_kernel(char* dst, const char* src, size_t bytes) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t head = 0;
  if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
    const size_t vecs = bytes / 16;
    for (size_t v = first; v < vecs; v += stride)
      reinterpret_cast<uint4*>(dst)[v] = reinterpret_cast<const uint4*>(src)[v];
    head = vecs * 16;
  }
  for (size_t i = head + first; i < bytes; i += stride) dst[i] = src[i];
}

// The widest row rmsnorm_vec_kernel stages (the default dynamic shared memory of a block).
constexpr size_t kMaxNormRowBytes = 48u << 10;

// Rows the 16-byte-piece kernels can take: whole pieces, each row's start aligned.
bool pieces_fit(const RowsView& v) {
  return v.cols % 8 == 0 && v.stride % 8 == 0 && aligned16(v.data);
}

int col_blocks(int64_t cols) {
  return std::min(ceil_div(cols, kThreads), 64);
}

}  // namespace

#define DISPATCH_ACT(dtype, T, ...) \
  do {                              \
    if ((dtype) == DType::bf16) {   \
      using T = __nv_bfloat16;      \
      __VA_ARGS__;                  \
    } else {                        \
      CHECK((dtype) == DType::f16); \
      using T = __half;             \
      __VA_ARGS__;                  \
    }                               \
  } while (0)

void embed(const void* table, DType table_dtype, const int32_t* tokens, RowsView out,
           cudaStream_t s) {
  CHECK(table_dtype == out.dtype);
  if (out.rows == 0) return;
  DISPATCH_ACT(
      out.dtype, T,
      embed_kernel<T><<<(unsigned)out.rows, kThreads, 0, s>>>(
          static_cast<const T*>(table), out.cols, tokens, static_cast<T*>(out.data), out.stride));
  CUDA_CHECK_LAUNCH();
}

void rmsnorm(RowsView x, const float* w, float eps, RowsView out, RowsView* res, cudaStream_t s) {
  CHECK(x.dtype == out.dtype && x.rows == out.rows && x.cols == out.cols);
  if (x.rows == 0) return;
  const size_t row_bytes = (size_t)x.cols * 2;
  if (pieces_fit(x) && pieces_fit(out) && (res == nullptr || pieces_fit(*res)) && aligned16(w) &&
      row_bytes <= kMaxNormRowBytes) {
    DISPATCH_ACT(
        x.dtype, T,
        rmsnorm_vec_kernel<T><<<(unsigned)x.rows, kThreads, row_bytes, s>>>(
            static_cast<const T*>(x.data), x.stride, w, eps, static_cast<T*>(out.data), out.stride,
            res ? static_cast<T*>(res->data) : nullptr, res ? res->stride : 0, (int)x.cols));
    CUDA_CHECK_LAUNCH();
    return;
  }
  DISPATCH_ACT(
      x.dtype, T,
      rmsnorm_kernel<T><<<(unsigned)x.rows, kThreads, 0, s>>>(
          static_cast<const T*>(x.data), x.stride, w, eps, static_cast<T*>(out.data), out.stride,
          res ? static_cast<T*>(res->data) : nullptr, res ? res->stride : 0, x.cols));
  CUDA_CHECK_LAUNCH();
}

void head_rmsnorm(RowsView x, const float* w, int head_dim, float eps, cudaStream_t s) {
  CHECK(head_dim > 0 && x.cols % head_dim == 0);
  const int heads = (int)(x.cols / head_dim);
  const int64_t items = x.rows * heads;
  if (items == 0) return;
  constexpr int kWarps = 4;
  DISPATCH_ACT(x.dtype, T,
               head_rmsnorm_kernel<T><<<(unsigned)ceil_div(items, kWarps), kWarps * 32, 0, s>>>(
                   static_cast<T*>(x.data), x.stride, x.rows, heads, head_dim, w, eps));
  CUDA_CHECK_LAUNCH();
}

void add_bias(RowsView out, const float* bias, cudaStream_t s) {
  if (out.rows == 0) return;
  dim3 grid(col_blocks(out.cols), (unsigned)out.rows);
  DISPATCH_ACT(out.dtype, T,
               add_bias_kernel<T>
               <<<grid, kThreads, 0, s>>>(static_cast<T*>(out.data), out.stride, bias, out.cols));
  CUDA_CHECK_LAUNCH();
}

void silu_mul(RowsView g, RowsView u, RowsView out, cudaStream_t s) {
  CHECK(g.rows == u.rows && g.cols == u.cols && out.rows == g.rows && out.cols == g.cols);
  if (g.rows == 0) return;
  if (pieces_fit(g) && pieces_fit(u) && pieces_fit(out)) {
    const int64_t pieces = g.cols / 8;
    dim3 grid(col_blocks(pieces), (unsigned)g.rows);
    DISPATCH_ACT(g.dtype, T,
                 silu_mul_vec_kernel<T><<<grid, kThreads, 0, s>>>(
                     static_cast<const T*>(g.data), g.stride, static_cast<const T*>(u.data),
                     u.stride, static_cast<T*>(out.data), out.stride, pieces));
    CUDA_CHECK_LAUNCH();
    return;
  }
  dim3 grid(col_blocks(g.cols), (unsigned)g.rows);
  DISPATCH_ACT(g.dtype, T,
               silu_mul_kernel<T><<<grid, kThreads, 0, s>>>(
                   static_cast<const T*>(g.data), g.stride, static_cast<const T*>(u.data), u.stride,
                   static_cast<T*>(out.data), out.stride, g.cols));
  CUDA_CHECK_LAUNCH();
}

void add(RowsView a, RowsView b, cudaStream_t s) {
  CHECK(a.rows == b.rows && a.cols == b.cols);
  if (a.rows == 0) return;
  dim3 grid(col_blocks(a.cols), (unsigned)a.rows);
  DISPATCH_ACT(a.dtype, T,
               add_kernel<T>
               <<<grid, kThreads, 0, s>>>(static_cast<T*>(a.data), a.stride,
                                          static_cast<const T*>(b.data), b.stride, a.cols));
  CUDA_CHECK_LAUNCH();
}

void gather_rows(RowsView x, const int32_t* rows, RowsView out, cudaStream_t s) {
  CHECK(x.cols == out.cols && x.dtype == out.dtype);
  if (out.rows == 0) return;
  DISPATCH_ACT(x.dtype, T,
               gather_kernel<T><<<(unsigned)out.rows, kThreads, 0, s>>>(
                   static_cast<const T*>(x.data), x.stride, rows, static_cast<T*>(out.data),
                   out.stride, x.cols));
  CUDA_CHECK_LAUNCH();
}

void convert_to_f32(RowsView x, float* dst, cudaStream_t s) {
  if (x.rows == 0) return;
  dim3 grid(col_blocks(x.cols), (unsigned)x.rows);
  DISPATCH_ACT(x.dtype, T,
               to_f32_kernel<T>
               <<<grid, kThreads, 0, s>>>(static_cast<const T*>(x.data), x.stride, dst, x.cols));
  CUDA_CHECK_LAUNCH();
}

void argmax_rows(RowsView x, int32_t* out, cudaStream_t s) {
  CHECK(x.dtype == DType::f32);
  if (x.rows == 0) return;
  argmax_kernel<<<(unsigned)x.rows, kArgmaxThreads, 0, s>>>(static_cast<const float*>(x.data),
                                                            x.stride, x.cols, out);
  CUDA_CHECK_LAUNCH();
}

void rope_store_kv(const RopeStoreArgs& a, cudaStream_t s) {
  if (a.q.rows == 0) return;
  CHECK(a.q.dtype == a.k.dtype && a.k.dtype == a.v.dtype);
  if (a.slots != nullptr && a.kv_dtype == DType::fp8_e4m3) return rope_store_kv_fp8(a, s);
  if (a.head_dim % (a.neox ? 16 : 8) == 0 && pieces_fit(a.q) && pieces_fit(a.k) &&
      pieces_fit(a.v) && (a.slots == nullptr || (aligned16(a.k_cache) && aligned16(a.v_cache)))) {
    // Many rows (a prefill): 16 heads a block share their angles; few rows (decode): 4 heads
    // a block keep a row spread over the multiprocessors.
    const int heads = a.n_heads + a.n_kv_heads, hpb = a.q.rows >= 64 ? 16 : kRopeHeadsPerBlock;
    const dim3 grid((unsigned)a.q.rows, (unsigned)ceil_div(std::max(1, heads), hpb));
    const size_t smem = (size_t)(a.head_dim / 2) * sizeof(float2);
    DISPATCH_ACT(a.q.dtype, T, {
      if (a.kv_dtype == DType::bf16) {
        launch_kernel(rope_store_vec_kernel<T, __nv_bfloat16>, grid, dim3(128), smem, s,
                      programmatic_launch(), a, hpb);
      } else {
        CHECK(a.kv_dtype == DType::f16);
        launch_kernel(rope_store_vec_kernel<T, __half>, grid, dim3(128), smem, s,
                      programmatic_launch(), a, hpb);
      }
    });
    CUDA_CHECK_LAUNCH();
    return;
  }
  const dim3 grid((unsigned)a.q.rows,
                  (unsigned)ceil_div(std::max(1, a.n_heads + a.n_kv_heads), kRopeHeadsPerBlock));
  DISPATCH_ACT(a.q.dtype, T, {
    if (a.kv_dtype == DType::bf16) {
      launch_kernel(rope_store_kernel<T, __nv_bfloat16>, grid, dim3(128), 0, s,
                    programmatic_launch(), a);
    } else {
      CHECK(a.kv_dtype == DType::f16);
      launch_kernel(rope_store_kernel<T, __half>, grid, dim3(128), 0, s, programmatic_launch(), a);
    }
  });
  CUDA_CHECK_LAUNCH();
}

void copy_chunks(const char* const* src_planes, char* const* dst_planes, int n_planes,
                 const int32_t* src_idx, const int32_t* dst_idx, int n, size_t chunk_bytes,
                 int max_ctas, cudaStream_t s) {
  CHECK(chunk_bytes % 16 == 0);
  if (n == 0 || n_planes == 0) return;
  dim3 grid((unsigned)std::max(1, std::min(n, max_ctas)), (unsigned)n_planes);
  copy_chunks_kernel<<<grid, kThreads, 0, s>>>(src_planes, dst_planes, src_idx, dst_idx, n,
                                               chunk_bytes);
  CUDA_CHECK_LAUNCH();
}

void copy_bytes(void* dst, const void* src, size_t bytes, cudaStream_t s) {
  if (bytes == 0) return;
  // One 16-byte piece per thread and pass: a few KB of step inputs is one round trip.
  const int blocks = (int)std::min<size_t>((bytes + kThreads * 16 - 1) / (kThreads * 16), 64);
  copy_bytes_kernel<<<blocks, kThreads, 0, s>>>(static_cast<char*>(dst),
                                                static_cast<const char*>(src), bytes);
  CUDA_CHECK_LAUNCH();
}

}  // namespace infercept::cuda
