// prefill_attn_test.cu: correctness and speed of the tensor-core prefill attention kernels, side
// by side on random paged KV caches (split_ctas cases: tiles split across their keys and merged
// by attention_combine, as the backend plans short chunks over long contexts): mma.sync
// (src/backend/cuda/attention_prefill.cu) and, where it runs (an sm_90a build on an sm_90 card,
// head size 128, one 16-bit type), wgmma (attention_prefill_wgmma.cu).
//
// Build: make -C bench/cuda prefill_attn_test      (links the kernel's .cu directly, -I src)
// Run:   bench/cuda/prefill_attn_test [--reps 10] [--warmup 3] [--only SUBSTR[,SUBSTR...]] [--seed
// N]
//
// Each case: random q (rows of a fused [q|k|v] activation, so q_stride > n_heads*head_dim),
// K/V caches whose every slot starts as NaN and whose slots of the sequences' tokens are
// then filled with random values, block tables that are a random permutation of the blocks
// (entries past a sequence's blocks are -1), out poisoned with NaN. plan_prefill() takes the
// sequences with q_len >= kPrefillMinQLen, as the backend does; the kernel's rows are compared with
// an fp32 GPU reference (one block per row and head, scores in shared memory, plain softmax), which
// in turn is compared on sampled (row, head) pairs with an fp64 host computation. The rows of
// shorter sequences must stay poisoned (the kernel must not touch them). Reported: rel = ||out -
// ref|| / ||ref|| over the kernel's rows (must be < 1e-2 and not NaN), max |out - ref|, NaN count,
// untouched-rows check, ref-vs-fp64 rel error, the kernel's median time of --reps runs after
// --warmup (CUDA events) and TFLOP/s on the causal FLOPs 4 * n_heads * head_dim * sum over rows of
// (position + 1) (= 4 h d n(n+1)/2 for a prompt). A case whose plan covers no row fails (it would
// check nothing). Exit code 0 if every check passed, 1 otherwise, 3 on a CUDA error.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/attention_prefill_wgmma.h"

using infercept::DType;
using namespace infercept::cuda;

#define CK(call)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "CUDA error %s (%s) at %s:%d in %s\n", cudaGetErrorName(e_), \
                   cudaGetErrorString(e_), __FILE__, __LINE__, #call);                  \
      std::exit(3);                                                                     \
    }                                                                                   \
  } while (0)

namespace {

// ---------------------------------------------------------------- element helpers
__host__ __device__ inline float ld_f(const void* p, int64_t i, bool bf) {
  if (bf) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  return __half2float(static_cast<const __half*>(p)[i]);
}
__host__ __device__ inline void st_f(void* p, int64_t i, float v, bool bf) {
  if (bf)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
  else
    static_cast<__half*>(p)[i] = __float2half(v);
}
__host__ __device__ inline uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return (uint32_t)x;
}

// Uniform in [-amp, amp) (std amp / sqrt(3)) from a hash of (seed, index).
__global__ void fill_random(void* p, int64_t n, bool bf, uint64_t seed, float amp) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float u =
        (hash32(seed * 0x9E3779B97F4A7C15ULL + (uint64_t)i) >> 8) * (1.0f / 16777216.0f);
    st_f(p, i, (2.0f * u - 1.0f) * amp, bf);
  }
}
__global__ void fill_u16(void* p, int64_t n, uint16_t v) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    static_cast<uint16_t*>(p)[i] = v;
}
// Random K and V for the slots of the valid tokens of every sequence.
__global__ void fill_tokens(void* k, void* v, const int32_t* slot_of_token, int64_t n_tok,
                            int width, bool bf, uint64_t seed, float amp) {
  const int64_t n = n_tok * width;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t tok = i / width, c = i % width, at = (int64_t)slot_of_token[tok] * width + c;
    const float u =
        (hash32(seed * 0x9E3779B97F4A7C15ULL + (uint64_t)i) >> 8) * (1.0f / 16777216.0f);
    const float w = (hash32(seed * 0x9E3779B97F4A7C15ULL + 0x5555555555ULL + (uint64_t)i) >> 8) *
                    (1.0f / 16777216.0f);
    st_f(k, at, (2.0f * u - 1.0f) * amp, bf);
    st_f(v, at, (2.0f * w - 1.0f), bf);
  }
}

// ---------------------------------------------------------------- fp32 reference
struct RefArgs {
  const void* q;
  int64_t q_stride;
  const void *k, *v;
  float* out;  // [rows, n_heads * hd]
  const int32_t *row_seq, *q_start, *q_len, *ctx_len, *bt;
  int max_blocks, bs, n_heads, n_kv, hd;
  float scale;
  bool act_bf, kv_bf;
};

// Block (row, head); 128 threads; dynamic smem: hd floats of q, then one score per key.
__global__ void ref_attention(RefArgs a) {
  extern __shared__ float sm[];
  float* qv = sm;
  float* sc = sm + a.hd;
  __shared__ float red[32];
  const int row = blockIdx.x, h = blockIdx.y, s = a.row_seq[row];
  const int pos = a.ctx_len[s] - a.q_len[s] + (row - a.q_start[s]);
  const int kvh = h / (a.n_heads / a.n_kv);
  const int64_t width = (int64_t)a.n_kv * a.hd;
  for (int d = threadIdx.x; d < a.hd; d += blockDim.x)
    qv[d] = ld_f(a.q, row * a.q_stride + (int64_t)h * a.hd + d, a.act_bf);
  __syncthreads();
  float mx = -INFINITY;
  for (int t = threadIdx.x; t <= pos; t += blockDim.x) {
    const int64_t slot = (int64_t)a.bt[(int64_t)s * a.max_blocks + t / a.bs] * a.bs + t % a.bs;
    float dot = 0.0f;
    for (int d = 0; d < a.hd; ++d) dot += qv[d] * ld_f(a.k, slot * width + kvh * a.hd + d, a.kv_bf);
    sc[t] = dot * a.scale;
    mx = fmaxf(mx, sc[t]);
  }
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int w = 0; w < (int)blockDim.x / 32; ++w) mx = fmaxf(mx, red[w]);
  __syncthreads();
  float sum = 0.0f;
  for (int t = threadIdx.x; t <= pos; t += blockDim.x) {
    sc[t] = expf(sc[t] - mx);
    sum += sc[t];
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = sum;
  __syncthreads();
  sum = 0.0f;
  for (int w = 0; w < (int)blockDim.x / 32; ++w) sum += red[w];
  for (int d = threadIdx.x; d < a.hd; d += blockDim.x) {
    float o = 0.0f;
    for (int t = 0; t <= pos; ++t) {
      const int64_t slot = (int64_t)a.bt[(int64_t)s * a.max_blocks + t / a.bs] * a.bs + t % a.bs;
      o += sc[t] * ld_f(a.v, slot * width + kvh * a.hd + d, a.kv_bf);
    }
    a.out[(int64_t)row * a.n_heads * a.hd + (int64_t)h * a.hd + d] = o / sum;
  }
}

// ---------------------------------------------------------------- cases
struct Case {
  std::string name;
  int n_heads, n_kv, hd;
  std::vector<int> q_lens, ctx_lens;
  DType act, kv;
  int block_size = 16;
  float qk_amp = 1.7320508f;  // q and k uniform in [-amp, amp): std 1 at the default
  bool timed = false;
  // false: no fp32 reference (its block holds a row's scores in shared memory: contexts up to
  // ~50k keys); only NaNs and untouched rows are checked, and the time is taken.
  bool checked = true;
  // > 0: plan_prefill's target of resident blocks, so that tiles that fill less of it are split
  // across their keys and their partial states combined (attention_combine), as the backend
  // plans short chunks over long contexts.
  int split_ctas = 0;
};

// The kernels a case runs on: the mma.sync kernel, and where it handles the case the wgmma
// kernel (the backend's choice there).
const char* kernel_name(PrefillKernel k) {
  return k == PrefillKernel::mma_sync ? "mma.sync" : "wgmma";
}

const char* dn(DType t) {
  return t == DType::bf16 ? "bf16" : "f16";
}

struct Result {
  double rel = NAN, max_abs = NAN, ref_rel = NAN, ms = NAN, tflops = NAN;
  int64_t nans = 0, touched = 0, rows = 0, rows_kernel = 0;
  int tiles = 0, combines = 0;
  bool pass = false;
};

template <typename T>
T* dalloc(size_t n) {
  T* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return p;
}

Result run_case(const Case& c, PrefillKernel kernel, uint64_t seed, int warmup, int reps) {
  Result res;
  std::mt19937_64 rng(seed);
  const int n_seqs = (int)c.q_lens.size(), bs = c.block_size, hd = c.hd;
  const bool act_bf = c.act == DType::bf16, kv_bf = c.kv == DType::bf16;
  std::vector<int32_t> q_start, q_len(c.q_lens.begin(), c.q_lens.end()),
      ctx(c.ctx_lens.begin(), c.ctx_lens.end()), row_seq;
  int rows = 0, max_blocks = 0, total_blocks = 0, max_ctx = 0;
  for (int s = 0; s < n_seqs; ++s) {
    q_start.push_back(rows);
    for (int i = 0; i < q_len[s]; ++i) row_seq.push_back(s);
    rows += q_len[s];
    max_blocks = std::max(max_blocks, (ctx[s] + bs - 1) / bs);
    total_blocks += (ctx[s] + bs - 1) / bs;
    max_ctx = std::max(max_ctx, ctx[s]);
  }
  total_blocks += 5;  // spare blocks nobody owns (stay NaN)
  res.rows = rows;
  std::vector<int32_t> ids(total_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> tables((size_t)n_seqs * max_blocks, -1), slot_of_token;
  size_t next = 0;
  for (int s = 0; s < n_seqs; ++s) {
    for (int b = 0; b < (ctx[s] + bs - 1) / bs; ++b)
      tables[(size_t)s * max_blocks + b] = ids[next++];
    for (int t = 0; t < ctx[s]; ++t)
      slot_of_token.push_back(tables[(size_t)s * max_blocks + t / bs] * bs + t % bs);
  }

  const int64_t q_stride = (int64_t)(c.n_heads + 2 * c.n_kv) * hd;  // fused qkv rows
  const int64_t out_stride = (int64_t)c.n_heads * hd;
  const int64_t width = (int64_t)c.n_kv * hd, slots = (int64_t)total_blocks * bs;
  void* d_q = dalloc<uint16_t>((size_t)rows * q_stride);
  void* d_k = dalloc<uint16_t>((size_t)(slots * width));
  void* d_v = dalloc<uint16_t>((size_t)(slots * width));
  void* d_out = dalloc<uint16_t>((size_t)rows * out_stride);
  float* d_ref = dalloc<float>((size_t)rows * out_stride);
  int32_t* d_q_start = dalloc<int32_t>(n_seqs);
  int32_t* d_q_len = dalloc<int32_t>(n_seqs);
  int32_t* d_ctx = dalloc<int32_t>(n_seqs);
  int32_t* d_bt = dalloc<int32_t>(tables.size());
  int32_t* d_row_seq = dalloc<int32_t>(rows);
  int32_t* d_slot_of_token = dalloc<int32_t>(slot_of_token.size());
  CK(cudaMemcpy(d_q_start, q_start.data(), n_seqs * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_q_len, q_len.data(), n_seqs * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_ctx, ctx.data(), n_seqs * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_bt, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_row_seq, row_seq.data(), (size_t)rows * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_slot_of_token, slot_of_token.data(), slot_of_token.size() * 4,
                cudaMemcpyHostToDevice));

  const uint16_t kv_nan = kv_bf ? 0x7FC0 : 0x7E00, act_nan = act_bf ? 0x7FC0 : 0x7E00;
  fill_u16<<<1024, 256>>>(d_k, slots * width, kv_nan);
  fill_u16<<<1024, 256>>>(d_v, slots * width, kv_nan);
  fill_random<<<1024, 256>>>(d_q, (int64_t)rows * q_stride, act_bf, seed * 3 + 1, c.qk_amp);
  fill_tokens<<<1024, 256>>>(d_k, d_v, d_slot_of_token, (int64_t)slot_of_token.size(), (int)width,
                             kv_bf, seed * 3 + 2, c.qk_amp);
  fill_u16<<<1024, 256>>>(d_out, (int64_t)rows * out_stride, act_nan);
  CK(cudaGetLastError());

  // Plan and run the kernel.
  const int64_t scratch_pairs = c.split_ctas > 0 ? prefill_scratch_pairs(c.split_ctas) : 0;
  const PrefillPlan plan =
      plan_prefill(q_start, q_len, ctx, c.n_heads, kPrefillMinQLen, c.split_ctas, 0, scratch_pairs);
  const std::vector<PrefillTile>& tiles = plan.tiles;
  res.tiles = (int)tiles.size();
  res.combines = (int)plan.combines.size();
  PrefillTile* d_tiles = dalloc<PrefillTile>(tiles.size());
  CK(cudaMemcpy(d_tiles, tiles.data(), tiles.size() * sizeof(PrefillTile), cudaMemcpyHostToDevice));
  AttnCombine* d_combines = dalloc<AttnCombine>(plan.combines.size());
  CK(cudaMemcpy(d_combines, plan.combines.data(), plan.combines.size() * sizeof(AttnCombine),
                cudaMemcpyHostToDevice));
  float* d_partial_acc = dalloc<float>((size_t)(scratch_pairs * hd));
  float* d_partial_ml = dalloc<float>((size_t)(scratch_pairs * 2));
  std::vector<char> covered(rows, 0);
  for (const PrefillTile& t : tiles)
    for (int r = 0; r < t.nrows; ++r) covered[t.row0 + r] = 1;
  double flops = 0.0;
  for (int r = 0; r < rows; ++r) {
    if (!covered[r]) continue;
    ++res.rows_kernel;
    const int s = row_seq[r];
    flops += 4.0 * c.n_heads * hd * (double)(ctx[s] - q_len[s] + (r - q_start[s]) + 1);
  }

  AttnArgs a{};
  a.q = d_q;
  a.q_stride = q_stride;
  a.k_cache = d_k;
  a.v_cache = d_v;
  a.out = d_out;
  a.out_stride = out_stride;
  a.act_dtype = c.act;
  a.kv_dtype = c.kv;
  a.q_start = d_q_start;
  a.q_len = d_q_len;
  a.ctx_len = d_ctx;
  a.block_tables = d_bt;
  a.max_blocks = max_blocks;
  a.block_size = bs;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv;
  a.head_dim = hd;
  a.scale = 1.0f / std::sqrt((float)hd);
  a.partial_acc = d_partial_acc;
  a.partial_ml = d_partial_ml;
  auto run = [&] {  // the kernel, then the merge of split tiles' parts (none: returns)
    attention_prefill(a, d_tiles, (int)tiles.size(), 0, kernel);
    attention_combine(a, d_combines, (int)plan.combines.size(), plan.max_combine_rows, 0);
  };
  run();
  CK(cudaDeviceSynchronize());

  // Reference.
  RefArgs ra{d_q,  q_stride,   d_k, d_v,       d_ref,  d_row_seq, d_q_start, d_q_len, d_ctx,
             d_bt, max_blocks, bs,  c.n_heads, c.n_kv, hd,        a.scale,   act_bf,  kv_bf};
  const size_t ref_smem = (size_t)(hd + max_ctx) * sizeof(float);
  if (c.checked)
    CK(cudaFuncSetAttribute(ref_attention, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)std::max<size_t>(ref_smem, 48 * 1024)));
  if (c.checked) ref_attention<<<dim3(rows, c.n_heads), 128, ref_smem>>>(ra);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  std::vector<uint16_t> out((size_t)rows * out_stride);
  std::vector<float> ref((size_t)rows * out_stride);
  CK(cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(ref.data(), d_ref, ref.size() * 4, cudaMemcpyDeviceToHost));
  double e2 = 0.0, r2 = 0.0, max_abs = 0.0;
  for (int r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < out_stride; ++i) {
      const size_t at = (size_t)r * out_stride + i;
      if (!covered[r]) {
        res.touched += out[at] != act_nan;
        continue;
      }
      const float o = ld_f(out.data(), (int64_t)at, act_bf);
      if (std::isnan(o)) {
        ++res.nans;
        continue;
      }
      if (!c.checked) continue;
      const double d = (double)o - ref[at];
      e2 += d * d;
      r2 += (double)ref[at] * ref[at];
      max_abs = std::max(max_abs, std::fabs(d));
    }
  }
  res.rel = res.rows_kernel > 0 ? std::sqrt(e2 / std::max(r2, 1e-30)) : 0.0;
  res.max_abs = max_abs;

  // fp64 host check of the reference on sampled (row, head) pairs.
  if (c.checked) {
    std::vector<uint16_t> hq((size_t)rows * q_stride), hk((size_t)(slots * width)),
        hv((size_t)(slots * width));
    CK(cudaMemcpy(hq.data(), d_q, hq.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hk.data(), d_k, hk.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hv.data(), d_v, hv.size() * 2, cudaMemcpyDeviceToHost));
    double fe2 = 0.0, fr2 = 0.0;
    std::vector<int> sample_rows;
    for (int s = 0; s < n_seqs; ++s) {  // first, last and a random row of each sequence
      if (q_len[s] == 0) continue;
      sample_rows.push_back(q_start[s]);
      sample_rows.push_back(q_start[s] + q_len[s] - 1);
      sample_rows.push_back(q_start[s] + (int)(rng() % q_len[s]));
    }
    for (int r : sample_rows) {
      const int s = row_seq[r], pos = ctx[s] - q_len[s] + (r - q_start[s]);
      for (int hs = 0; hs < 2; ++hs) {
        const int h = hs == 0 ? 0 : (int)(rng() % c.n_heads), kvh = h / (c.n_heads / c.n_kv);
        std::vector<double> sc(pos + 1), o(hd, 0.0);
        double mx = -1e300, sum = 0.0;
        for (int t = 0; t <= pos; ++t) {
          const int64_t slot = (int64_t)tables[(size_t)s * max_blocks + t / bs] * bs + t % bs;
          double dot = 0.0;
          for (int d = 0; d < hd; ++d)
            dot += (double)ld_f(hq.data(), (int64_t)r * q_stride + (int64_t)h * hd + d, act_bf) *
                   ld_f(hk.data(), slot * width + kvh * hd + d, kv_bf);
          sc[t] = dot * a.scale;
          mx = std::max(mx, sc[t]);
        }
        for (int t = 0; t <= pos; ++t) {
          const int64_t slot = (int64_t)tables[(size_t)s * max_blocks + t / bs] * bs + t % bs;
          const double p = std::exp(sc[t] - mx);
          sum += p;
          for (int d = 0; d < hd; ++d)
            o[d] += p * ld_f(hv.data(), slot * width + kvh * hd + d, kv_bf);
        }
        for (int d = 0; d < hd; ++d) {
          const double want = o[d] / sum;
          const double got = ref[(size_t)r * out_stride + (size_t)h * hd + d];
          fe2 += (got - want) * (got - want);
          fr2 += want * want;
        }
      }
    }
    res.ref_rel = std::sqrt(fe2 / std::max(fr2, 1e-30));
  }

  // Timing.
  if (c.timed && reps > 0) {
    for (int i = 0; i < warmup; ++i) run();
    CK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
      CK(cudaEventRecord(e0));
      run();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float t = 0.0f;
      CK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    res.ms = ms[ms.size() / 2];
    res.tflops = flops / (res.ms * 1e-3) / 1e12;
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
  }

  res.pass = res.rows_kernel == 0 ? false
             : c.checked          ? res.rel < 1e-2 && !std::isnan(res.rel) && res.nans == 0 &&
                               res.touched == 0 && res.ref_rel < 1e-4
                         : res.nans == 0 && res.touched == 0;
  for (void* p : {(void*)d_q, d_k, d_v, d_out, (void*)d_ref, (void*)d_q_start, (void*)d_q_len,
                  (void*)d_ctx, (void*)d_bt, (void*)d_row_seq, (void*)d_slot_of_token,
                  (void*)d_tiles, (void*)d_combines, (void*)d_partial_acc, (void*)d_partial_ml})
    CK(cudaFree(p));
  return res;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 10, warmup = 3;
  uint64_t seed = 1234;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (k == "--warmup" && i + 1 < argc)
      warmup = std::atoi(argv[++i]);
    else if (k == "--seed" && i + 1 < argc)
      seed = std::strtoull(argv[++i], nullptr, 10);
    else if (k == "--only" && i + 1 < argc)
      only = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--reps N] [--warmup N] [--seed N] [--only SUBSTR[,SUBSTR...]]\n",
                   argv[0]);
      return 2;
    }
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs)\n\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);

  const DType B = DType::bf16, H = DType::f16;
  std::vector<Case> cases = {
      {"7b-prompt-4096", 32, 32, 128, {4096}, {4096}, B, B, 16, 1.7320508f, true},
      {"gqa-chunk-1000/1500", 32, 8, 128, {1000}, {1500}, B, B, 16, 1.7320508f, true},
      {"mha9/3-hd64-300", 9, 3, 64, {300}, {300}, B, B, 16, 1.7320508f, true},
      {"multi-seq-gqa",
       32,
       8,
       128,
       {700, 1, 130, 40, 64, 63, 257},
       {700, 3000, 2000, 40, 64, 900, 1300},
       B,
       B,
       16,
       1.7320508f,
       true},
      {"multi-seq-hd64",
       9,
       3,
       64,
       {129, 5, 80, 400},
       {129, 300, 1000, 555},
       B,
       B,
       16,
       1.7320508f,
       true},
      {"f16-gqa-513/777", 32, 8, 128, {513}, {777}, H, H, 16, 1.7320508f, true},
      {"act-bf16/kv-f16-hd64", 16, 4, 64, {250, 77}, {600, 77}, B, H, 16, 1.7320508f, false},
      {"act-f16/kv-bf16-hd128", 8, 2, 128, {190}, {190}, H, B, 16, 1.7320508f, false},
      {"hd32-8/8", 8, 8, 32, {200, 66}, {260, 66}, B, B, 16, 1.7320508f, false},
      {"block32-gqa", 32, 8, 128, {333, 128}, {1000, 128}, B, B, 32, 1.7320508f, false},
      {"block48-hd64", 8, 2, 64, {300}, {450}, B, B, 48, 1.7320508f, false},
      {"sharp-softmax", 32, 8, 128, {600}, {1100}, B, B, 16, 4.0f, false},
      {"gqa-prompt-4096", 32, 8, 128, {4096}, {4096}, B, B, 16, 1.7320508f, true},
      {"hd64-prompt-4096", 32, 32, 64, {4096}, {4096}, B, B, 16, 1.7320508f, true},
      {"8x512-prompts", 32, 32, 128, std::vector<int>(8, 512), std::vector<int>(8, 512), B, B, 16,
       1.7320508f, true},
      // The long-context shapes of Llama-3.1-8B (32 query heads over 8 KV heads): a chunk over a
      // checked 40k prefix, a 32k prompt, and the 2,048-row chunk over a 128k prefix
      // (unchecked: the reference holds at most ~50k keys a row).
      {"8b-chunk-2048/40000", 32, 8, 128, {2048}, {40000}, B, B, 16, 1.7320508f, true},
      {"8b-prompt-32768", 32, 8, 128, {32768}, {32768}, B, B, 16, 1.7320508f, true},
      {"8b-chunk-2048/131072", 32, 8, 128, {2048}, {131072}, B, B, 16, 1.7320508f, true, false},
      // Short chunks over long contexts with the backend's split (a card of 132 multiprocessors,
      // one block each): parts of 1,088 keys that start and end inside 128-key tiles; parts of
      // 1,344 and 1,536; and head size 64 (the mma.sync kernel alone).
      {"split-8/4300", 32, 8, 128, {8}, {4300}, B, B, 16, 1.7320508f, true, true, 132},
      {"split-8,8/2600,3000",
       32,
       8,
       128,
       {8, 8},
       {2600, 3000},
       B,
       B,
       16,
       1.7320508f,
       true,
       true,
       132},
      {"split-hd64-20/3000", 9, 3, 64, {20}, {3000}, B, B, 16, 1.7320508f, true, true, 132},
  };

  std::printf(
      "| %-22s | %-8s | %5s | %3s | %-9s | %-28s | %5s | %9s | %9s | %4s | %7s | %9s | %9s | %8s | "
      "%s |\n",
      "case", "kernel", "heads", "hd", "act/kv", "q_len / ctx_len", "tiles", "rel err", "max abs",
      "NaN", "others", "ref-fp64", "ms", "TFLOP/s", "result");
  std::printf(
      "|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", std::string(24, '-').c_str(),
      std::string(10, '-').c_str(), std::string(7, '-').c_str(), std::string(5, '-').c_str(),
      std::string(11, '-').c_str(), std::string(30, '-').c_str(), std::string(7, '-').c_str(),
      std::string(11, '-').c_str(), std::string(11, '-').c_str(), std::string(6, '-').c_str(),
      std::string(9, '-').c_str(), std::string(11, '-').c_str(), std::string(11, '-').c_str(),
      std::string(10, '-').c_str(), std::string(8, '-').c_str());
  bool all = true;
  int idx = 0;
  for (const Case& c : cases) {
    ++idx;
    if (!only.empty()) {  // comma-separated substrings
      bool hit = false;
      for (size_t b = 0; b <= only.size();) {
        size_t e = only.find(',', b);
        if (e == std::string::npos) e = only.size();
        if (e > b && c.name.find(only.substr(b, e - b)) != std::string::npos) hit = true;
        b = e + 1;
      }
      if (!hit) continue;
    }
    std::vector<PrefillKernel> kernels = {PrefillKernel::mma_sync};
    if (wgmma_prefill_handles(c.act, c.kv, c.hd)) kernels.push_back(PrefillKernel::wgmma);
    for (PrefillKernel kernel : kernels) {
      const Result r = run_case(c, kernel, seed + 7919 * idx, warmup, reps);
      all = all && r.pass;
      char heads[16], dt[16], ms[16], tf[16];
      std::snprintf(heads, sizeof heads, "%d/%d", c.n_heads, c.n_kv);
      std::snprintf(dt, sizeof dt, "%s/%s", dn(c.act), dn(c.kv));
      std::snprintf(ms, sizeof ms, std::isnan(r.ms) ? "-" : "%.3f", r.ms);
      std::snprintf(tf, sizeof tf, std::isnan(r.tflops) ? "-" : "%.1f", r.tflops);
      std::string lens = join(c.q_lens) + " / " + join(c.ctx_lens);
      if (lens.size() > 28) lens = lens.substr(0, 25) + "...";
      std::printf(
          "| %-22s | %-8s | %5s | %3d | %-9s | %-28s | %5d | %9.2e | %9.2e | %4lld | %7s | %9.2e | "
          "%9s | %8s | %s |\n",
          c.name.c_str(), kernel_name(kernel), heads, c.hd, dt, lens.c_str(), r.tiles, r.rel,
          r.max_abs, (long long)r.nans, r.touched == 0 ? "ok" : "TOUCHED", r.ref_rel, ms, tf,
          r.pass ? (c.checked ? "PASS" : "no NaN") : "FAIL");
      std::fflush(stdout);
    }
  }
  std::printf(
      "\nrel err: ||out - ref|| / ||ref|| over the kernel's rows vs an fp32 GPU reference "
      "(limit 1e-2); ref-fp64: that reference vs fp64 on sampled rows (limit 1e-4);\n"
      "others: rows of sequences with q_len < %d left untouched; TFLOP/s: causal FLOPs "
      "4*heads*hd*sum(pos+1), median of %d runs after %d warm-up.\n",
      kPrefillMinQLen, reps, warmup);
  std::printf("%s\n", all ? "ALL PASS" : "SOME CHECKS FAILED");
  return all ? 0 : 1;
}
