#include "backend/cuda/attend_project.h"

#include <algorithm>
#include <cfloat>
#include <mutex>

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gemv_pieces.cuh"
#include "backend/cuda/launch_mode.h"
#include "core/check.h"

namespace infercept::cuda {
namespace {

constexpr int kWarps = 8;      // a block's warps; one output row of the product a warp
constexpr int kAttnWarps = 2;  // the warps that load and score an item's keys
constexpr int kUnroll = 8;     // 16-byte weight loads in flight a lane, as gemv_kernel
// (used only by the sm_90 kernel body: the older cards' pass compiles it empty)
[[maybe_unused]] constexpr int kRoundPieces = 32 * kUnroll;

// The block's shared scalars and small arrays, after the stage in the dynamic shared memory
// (the stages-first layout of DecodeKernelSmem, attention.cu).
template <int HD, int GMAX>
struct AttendShared {
  float qs[GMAX][HD];                // the item's query heads, rotated and scaled
  float wml[2 * kAttnWarps * GMAX];  // the warps' softmax maxima and sums
  float weight[kAttendProjectMaxParts][GMAX], den[GMAX];  // the last partition's merge
  int claimed, last;
};

// The dynamic shared memory's first part: an item's stage, then the product's input rows.
template <typename KV, int HD>
__host__ __device__ constexpr size_t stage_bytes(int k, int rows) {
  const size_t stage = DecodeStage<KV, HD, kAttnWarps>::kBytes, xs = (size_t)rows * k * 2;
  return ((stage > xs ? stage : xs) + 15) / 16 * 16;
}

// One work item: partition `rank` of group `grp`'s keys (a row, a KV head and a share of its
// query heads), as decode_rope_kernel's block computes it but on kAttnWarps warps (the stage
// of four would leave room for three blocks a multiprocessor, and the product needs four);
// the partition's softmax state goes to the scratch pairs, and the group's last partition
// merges them into the attention output.
template <typename T, typename KV, int HD, int GMAX>
__device__ void attend_item(const AttnArgs& a, const DecodeRopeArgs& r, int rows, int item,
                            int* counters, uint4* stage_raw, AttendShared<HD, GMAX>& sh) {
  using Stage = DecodeStage<KV, HD, kAttnWarps>;
  constexpr int kPer = HD / 32;
  auto qs = sh.qs;
  const int parts = r.parts, grp = item / parts, rank = item % parts;
  const int row = grp % rows, kvh_slice = grp / rows;
  const int kvh = kvh_slice / r.group_split, slice = kvh_slice % r.group_split;
  const int group = a.n_heads / a.n_kv_heads, heads = group / r.group_split;
  const int head0 = kvh * group + slice * heads;
  const int warp = threadIdx.x / 32;
  const int32_t* bt = a.block_tables + (int64_t)row * a.max_blocks;
  const int ctx = a.ctx_len[row];
  const int new_key = ctx - 1;
  constexpr int kSpanUnit = kAttnWarps * 32;  // whole chunks for every warp
  const int span = ((ctx + parts - 1) / parts + kSpanUnit - 1) / kSpanUnit * kSpanUnit;
  const int kbeg = rank * span, kend = min(ctx, kbeg + span);

  float m[GMAX], l[GMAX], acc[GMAX][kPer];
  clear_softmax_state(m, l, acc);
  uint4* my_stage = stage_raw + (warp % kAttnWarps) * Stage::kWarpPieces;
  const int first_c0 = kbeg + warp * 32;
  bool first_issued = false;
  if (warp < kAttnWarps && a.prewait && first_c0 < kend && min(first_c0 + 31, kend - 1) < new_key) {
    issue_decode_chunk<KV, HD>(a, bt, kvh, kend, first_c0, my_stage);
    first_issued = true;
  }
  // The head's items: rows x parts x group_split. (Without counters the kernel waited for
  // the whole product at its start.)
  if (r.ready != nullptr) wait_for_head_rows(r, kvh, rows * parts * r.group_split);
  rotate_q_and_store_new_key<T, KV, HD, GMAX>(a, r, row, kvh, head0, heads, kbeg, kend, new_key,
                                              qs);
  __syncthreads();  // qs, and the new key in the cache before a chunk holding it is loaded
  if (warp < kAttnWarps)
    decode_warp_chunks<KV, HD, GMAX, kAttnWarps>(a, bt, kvh, kend, first_c0, first_issued, qs,
                                                 my_stage, m, l, acc);
  // The partition's state to its scratch pairs (item x heads + g), as combine_decode_row
  // reads them.
  const int64_t pair0 = (int64_t)item * heads;
  decode_block_state<HD, GMAX, kAttnWarps>(
      stage_raw, sh.wml, heads, m, l, acc, [&](int g, int d, float num, float den, float mx) {
        a.partial_acc[(pair0 + g) * HD + d] = num;
        if (d == 0) {
          a.partial_ml[(pair0 + g) * 2] = den > 0.0f ? mx : -FLT_MAX;
          a.partial_ml[(pair0 + g) * 2 + 1] = den;
        }
      });
  __syncthreads();
  int* part_count = counters + kAttendProjectPartCounts + grp;
  if (threadIdx.x == 0) {
    __threadfence();  // this block's partial state before its count
    sh.last = atomicAdd(part_count, 1) == parts - 1;
  }
  __syncthreads();
  if (!sh.last) return;
  // The group's last partition: every other one's state is in L2 (their fences came before
  // their counts); merge them in partition order as decode_rope_kernel's cluster does. The
  // partitions' maxima and sums are read by all threads at once into shared memory, and each
  // output's partial sums in batches of independent loads: a loop of dependent L2 reads over
  // 17 partitions cost ~10 us on the step's path.
  __threadfence();
  auto weight = sh.weight;
  float* den_sh = sh.den;
  const int64_t base = (int64_t)grp * parts * heads;               // pair of (partition 0, head 0)
  for (int j = threadIdx.x; j < parts * heads; j += blockDim.x) {  // j = p * heads + g
    weight[j / heads][j % heads] = __ldcg(a.partial_ml + (base + j) * 2);  // max
  }
  float* pl_sh = reinterpret_cast<float*>(stage_raw);  // the stage is free: sums per pair
  for (int j = threadIdx.x; j < parts * heads; j += blockDim.x)
    pl_sh[j] = __ldcg(a.partial_ml + (base + j) * 2 + 1);
  __syncthreads();
  if (threadIdx.x < heads) {  // the head's max over partitions that saw a key, then weights
    const int g = threadIdx.x;
    float mx = -FLT_MAX;
    for (int q = 0; q < parts; ++q)
      if (pl_sh[q * heads + g] > 0.0f) mx = fmaxf(mx, weight[q][g]);
    float den = 0.0f;
    for (int q = 0; q < parts; ++q) {
      const float pl = pl_sh[q * heads + g];
      const float w = pl == 0.0f ? 0.0f : __expf(weight[q][g] - mx);
      den += w * pl;  // + 0 for a partition that saw no key, as skipping it
      weight[q][g] = w;
    }
    den_sh[g] = den;
  }
  __syncthreads();
  T* out = static_cast<T*>(a.out) + (int64_t)row * a.out_stride + head0 * HD;
  for (int idx = threadIdx.x; idx < heads * HD; idx += blockDim.x) {
    const int g = idx / HD, d = idx % HD;
    float num = 0.0f;
    for (int q0 = 0; q0 < parts; q0 += 8) {
      float v[8];
#pragma unroll
      for (int i = 0; i < 8; ++i)
        v[i] = q0 + i < parts
                   ? __ldcg(a.partial_acc + (base + (int64_t)(q0 + i) * heads + g) * HD + d)
                   : 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i)
        if (q0 + i < parts) num += weight[q0 + i][g] * v[i];
    }
    const float den = den_sh[g];
    out[idx] = from_f32<T>(den > 0.0f ? num / den : 0.0f);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    *part_count = 0;  // for the next launch (this layer's next step)
    // the group's output, published by the barrier above
    red_release_add(counters + kAttendProjectGroupsDone, 1);
  }
}

template <typename T, typename KV, int HD, int GMAX, int NR>
__global__ void __launch_bounds__(kWarps * 32, 4)
    attend_project_kernel(AttnArgs a, DecodeRopeArgs r, AttendProjectArgs p) {
  pdl_launch_dependents();  // the FFN's product may be placed as these blocks retire
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ uint4 smem_raw[];  // an item's stage; then the product's input rows
  auto& sh = *reinterpret_cast<AttendShared<HD, GMAX>*>(reinterpret_cast<unsigned char*>(smem_raw) +
                                                        stage_bytes<KV, HD>(p.k, NR));
  int& claimed = sh.claimed;
  int* const counters = p.counters;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int nv = p.k / 8, rounds = (nv + kRoundPieces - 1) / kRoundPieces;
  const int total_blocks = (p.m + kWarps - 1) / kWarps;  // virtual blocks of kWarps rows
  int vb = blockIdx.x;
  const T* wo = static_cast<const T*>(p.wo);
  // The attention's items, taken by ticket until none is left.
  const int n_groups = NR * a.n_kv_heads * r.group_split, n_items = n_groups * r.parts;
  if (r.ready == nullptr) pdl_wait();  // no per-head counters: the whole Q/K/V product
  for (;;) {
    if (threadIdx.x == 0) claimed = atomicAdd(counters + kAttendProjectTickets, 1);
    __syncthreads();
    const int item = claimed;
    __syncthreads();  // every thread has read it before the next ticket overwrites it
    if (item >= n_items) break;
    attend_item<T, KV, HD, GMAX>(a, r, NR, item, counters, smem_raw, sh);
    __syncthreads();  // the stage is free again
  }
  // The product, as gemv_kernel's accumulate epilogue computes it (the same order of sums,
  // so the same bits as project_add's launch).
  const uint4* wr = nullptr;
  int row = 0;
  auto locate = [&](int b) {
    for (; b < total_blocks; b += (int)gridDim.x)
      if (b * kWarps + warp < p.m) break;
    if (b < total_blocks) {
      row = b * kWarps + warp;
      wr = reinterpret_cast<const uint4*>(wo + (int64_t)row * p.k);
    }
    return b;
  };
  uint4 wv[kUnroll];
  auto load_round = [&](int rd) {
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) {
      const int c = rd * kRoundPieces + lane + 32 * i;
      wv[i] = c < nv ? load_stream(wr + c) : make_uint4(0, 0, 0, 0);
    }
  };
  // This block's first round of weights into registers while the last groups finish (after
  // its items, so their loads went first: fetching wo from the start held the attention's KV
  // reads behind 33 MB of weight traffic, PERF 4.5q).
  vb = locate(vb);
  if (vb < total_blocks) load_round(0);
  // Every group's output, then the product. The last block past the wait resets the
  // launch's counters: by then every block has taken its last ticket and read the count.
  if (threadIdx.x == 0) {
    while (load_acquire(counters + kAttendProjectGroupsDone) < n_groups) __nanosleep(32);
    if (atomicAdd(counters + kAttendProjectPassed, 1) == (int)gridDim.x - 1) {
      atomicExch(counters + kAttendProjectTickets, 0);
      atomicExch(counters + kAttendProjectGroupsDone, 0);
      atomicExch(counters + kAttendProjectPassed, 0);
    }
  }
  __syncthreads();
  // The attention output rows to shared memory, read past L1 (other blocks wrote them).
  uint4* xs = smem_raw;
  for (int rr = 0; rr < NR; ++rr)
    for (int c = threadIdx.x; c < nv; c += blockDim.x)
      xs[rr * nv + c] = __ldcg(reinterpret_cast<const uint4*>(static_cast<const T*>(a.out) +
                                                              (int64_t)rr * a.out_stride) +
                               c);
  __syncthreads();
  float acc[NR];
#pragma unroll
  for (int rr = 0; rr < NR; ++rr) acc[rr] = 0.0f;
  int round = 0;
  while (vb < total_blocks) {
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) {
      const int c = round * kRoundPieces + lane + 32 * i;
      if (c >= nv) continue;
      float wf[8];
      unpack8<T>(wv[i], wf);
#pragma unroll
      for (int rr = 0; rr < NR; ++rr) {
        float xf[8];
        unpack8<T>(xs[rr * nv + c], xf);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[rr] = fmaf(wf[j], xf[j], acc[rr]);
      }
    }
    if (++round < rounds) {
      load_round(round);
      continue;
    }
#pragma unroll
    for (int rr = 0; rr < NR; ++rr)
#pragma unroll
      for (int off = 16; off > 0; off /= 2) acc[rr] += __shfl_xor_sync(0xffffffffu, acc[rr], off);
    float v = acc[0];
#pragma unroll
    for (int rr = 1; rr < NR; ++rr)
      if (lane == rr) v = acc[rr];
#pragma unroll
    for (int rr = 0; rr < NR; ++rr) acc[rr] = 0.0f;
    T* out = static_cast<T*>(p.residual) + (int64_t)lane * p.residual_stride + row;
    vb = locate(vb + (int)gridDim.x);
    round = 0;
    if (vb < total_blocks) load_round(0);
    // Rounded as the unfused product (to T) and residual add (to T) would be.
    if (lane < NR) *out = from_f32<T>(to_f32(*out) + to_f32(from_f32<T>(v)));
  }
#else
  __trap();  // launched only on sm_90 and later (attend_project_fits)
#endif
}

template <typename T, typename KV, int HD, int GMAX, int NR>
void launch(const AttnArgs& a, const DecodeRopeArgs& r, const AttendProjectArgs& p,
            cudaStream_t s) {
  auto* kernel = attend_project_kernel<T, KV, HD, GMAX, NR>;
  const size_t smem = stage_bytes<KV, HD>(p.k, NR) + sizeof(AttendShared<HD, GMAX>);
  // The grid: as many blocks as are resident at once (4 a multiprocessor), asked once per
  // instance and shared-memory size.
  static std::mutex mu;
  static size_t asked_smem = 0;
  static int grid = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (grid == 0 || asked_smem != smem) {
      CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
      int device = 0, sms = 0, per_sm = 0;
      CUDA_CHECK(cudaGetDevice(&device));
      CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, smem));
      grid = std::max(1, per_sm) * sms;
      asked_smem = smem;
    }
  }
  launch_kernel(kernel, dim3((unsigned)grid), dim3(kWarps * 32), smem, s, programmatic_launch(), a,
                r, p);
}

template <typename T, typename KV, int HD, int GMAX>
void launch_rows(const AttnArgs& a, const DecodeRopeArgs& r, const AttendProjectArgs& p, int rows,
                 cudaStream_t s) {
  if (rows == 1)
    launch<T, KV, HD, GMAX, 1>(a, r, p, s);
  else
    launch<T, KV, HD, GMAX, 2>(a, r, p, s);
}

template <typename T, typename KV, int HD>
void launch_group(const AttnArgs& a, const DecodeRopeArgs& r, const AttendProjectArgs& p, int rows,
                  cudaStream_t s) {
  const int heads = a.n_heads / a.n_kv_heads / r.group_split;  // query heads an item
  if (heads <= 1)
    launch_rows<T, KV, HD, 1>(a, r, p, rows, s);
  else if (heads <= 2)
    launch_rows<T, KV, HD, 2>(a, r, p, rows, s);
  else
    launch_rows<T, KV, HD, 4>(a, r, p, rows, s);
}

template <typename T, typename KV>
void launch_hd(const AttnArgs& a, const DecodeRopeArgs& r, const AttendProjectArgs& p, int rows,
               cudaStream_t s) {
  switch (a.head_dim) {
    case 32:
      return launch_group<T, KV, 32>(a, r, p, rows, s);
    case 64:
      return launch_group<T, KV, 64>(a, r, p, rows, s);
    case 128:
      return launch_group<T, KV, 128>(a, r, p, rows, s);
    default:
      CHECK_MSG(false, "attend_project supports head_dim 32, 64 and 128");
  }
}

}  // namespace

int attend_project_parts(std::span<const int32_t> ctx_len, int partition_keys, int n_groups,
                         int blocks) {
  CHECK(!ctx_len.empty() && partition_keys > 0 && n_groups > 0);
  int parts = 1;
  for (int32_t c : ctx_len) parts = std::max(parts, ceil_div(c, partition_keys));
  return std::clamp(std::min(parts, blocks / n_groups), 1, kAttendProjectMaxParts);
}

bool attend_project_fits(const AttnArgs& a, const DecodeRopeArgs& r, const AttendProjectArgs& p,
                         int rows) {
  const bool sm90 = device_compute_major() >= 9;
  const bool hd_ok = a.head_dim == 32 || a.head_dim == 64 || a.head_dim == 128;
  return sm90 && hd_ok && (rows == 1 || rows == 2) && a.n_kv_heads > 0 &&
         a.n_heads % a.n_kv_heads == 0 && r.group_split >= 1 &&
         (a.n_heads / a.n_kv_heads) % r.group_split == 0 &&
         a.n_heads / a.n_kv_heads / r.group_split <= 4 && r.parts >= 1 &&
         a.kv_dtype == a.act_dtype &&
         rows * a.n_kv_heads * r.group_split <= kAttendProjectMaxGroups &&
         p.k == a.n_heads * a.head_dim && p.k % 8 == 0 && p.m > 0 &&
         (reinterpret_cast<uintptr_t>(p.wo) % 16) == 0 &&
         (reinterpret_cast<uintptr_t>(a.out) % 16) == 0 && a.out_stride % 8 == 0 &&
         (size_t)rows * (size_t)p.k * 2 <= (96u << 10);
}

void attend_project(const AttnArgs& a, const DecodeRopeArgs& r, const AttendProjectArgs& p,
                    int rows, cudaStream_t s) {
  CHECK(attend_project_fits(a, r, p, rows));
  const bool bf = a.act_dtype == DType::bf16;
  CHECK(bf || a.act_dtype == DType::f16);
  if (bf)
    launch_hd<__nv_bfloat16, __nv_bfloat16>(a, r, p, rows, s);
  else
    launch_hd<__half, __half>(a, r, p, rows, s);
  CUDA_CHECK_LAUNCH();
}

}  // namespace infercept::cuda
