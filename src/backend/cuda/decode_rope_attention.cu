#include "backend/cuda/decode_rope_attention.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/launch_mode.h"
#include "core/check.h"

namespace infercept::cuda {
namespace {

// The block's small arrays, after the stages in the dynamic shared memory (the stages-first
// layout of DecodeKernelSmem, attention.cu).
template <typename KV, int HD, int GMAX>
struct DecodeRopeShared {
  float qs[GMAX][HD];                                       // rotated and scaled
  float part_num[GMAX][HD], part_mx[GMAX], part_den[GMAX];  // read by the cluster
  float wml[2 * DecodeStage<KV, HD>::kWarps * GMAX];        // the warps' maxima, sums
};
template <typename KV, int HD, int GMAX>
constexpr size_t decode_rope_smem() {
  return DecodeStage<KV, HD>::kBytes + sizeof(DecodeRopeShared<KV, HD, GMAX>);
}

// decode_rope_attention(): block (row * parts + rank, kvh) takes partition `rank` of the row's
// keys for KV head kvh. The row's `parts` blocks form one thread-block cluster, so their
// softmax states meet in distributed shared memory (sm_90) instead of through global memory,
// a fence and a counter as in decode_kernel; and the RoPE of q and of the new key, and the
// new key's store, happen here rather than in a kernel of their own (PERF 4.5o: at batch 1
// that kernel's boundary and the global merge cost ~7 us a layer).
template <typename T, typename KV, int HD, int GMAX>
__global__ void __launch_bounds__(128) decode_rope_kernel(AttnArgs a, DecodeRopeArgs r) {
  pdl_launch_dependents();  // the output projection (a GEMV at batch 1) may start its loads
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  using Stage = DecodeStage<KV, HD>;
  constexpr int kWarps = Stage::kWarps, kPer = HD / 32;
  extern __shared__ uint4 stage_raw[];  // [kWarps][K, V][32 rows] of pieces; then merge buffer
  auto& sh =
      *reinterpret_cast<DecodeRopeShared<KV, HD, GMAX>*>(stage_raw + kWarps * Stage::kWarpPieces);
  auto qs = sh.qs;
  auto part_num = sh.part_num;
  float *part_mx = sh.part_mx, *part_den = sh.part_den, *wml = sh.wml;
  const int parts = r.parts, rank = (int)cluster.block_rank();
  const int row = (int)blockIdx.x / parts;
  // blockIdx.y: KV head kvh's query heads [slice * heads, (slice + 1) * heads) of its group.
  const int kvh = blockIdx.y / r.group_split, slice = blockIdx.y % r.group_split;
  const int group = a.n_heads / a.n_kv_heads, heads = group / r.group_split;
  const int head0 = kvh * group + slice * heads;  // this block's first query head
  const int warp = threadIdx.x / 32;
  const int32_t* bt = a.block_tables + (int64_t)row * a.max_blocks;
  // With prewait the lengths and tables were on the device before the kernel before started.
  const int ctx = a.ctx_len[row];
  const int new_key = ctx - 1;  // this step's one row of the sequence
  const int span = ((ctx + parts - 1) / parts + 31) / 32 * 32;
  const int kbeg = rank * span, kend = min(ctx, kbeg + span);

  float m[GMAX], l[GMAX], acc[GMAX][kPer];
  clear_softmax_state(m, l, acc);
  uint4* my_stage = stage_raw + warp * Stage::kWarpPieces;
  const int first_c0 = kbeg + warp * 32;
  bool first_issued = false;
  if (a.prewait && first_c0 < kend && min(first_c0 + 31, kend - 1) < new_key) {
    issue_decode_chunk<KV, HD>(a, bt, kvh, kend, first_c0, my_stage);
    first_issued = true;
  }
  if (r.ready != nullptr) {  // the head's blocks: rows x parts x group_split
    wait_for_head_rows(r, kvh, (int)gridDim.x * r.group_split);
  } else {
    pdl_wait();  // q, k and v of this step, from the Q/K/V product
  }
  rotate_q_and_store_new_key<T, KV, HD, GMAX>(a, r, row, kvh, head0, heads, kbeg, kend, new_key,
                                              qs);
  __syncthreads();  // qs, and the new key in the cache before a chunk holding it is loaded
  decode_warp_chunks<KV, HD, GMAX>(a, bt, kvh, kend, first_c0, first_issued, qs, my_stage, m, l,
                                   acc);
  decode_block_state<HD, GMAX, kWarps>(stage_raw, wml, heads, m, l, acc,
                                       [&](int g, int d, float num, float den, float mx) {
                                         part_num[g][d] = num;
                                         if (d == 0) {
                                           part_mx[g] = den > 0.0f ? mx : -FLT_MAX;
                                           part_den[g] = den;
                                         }
                                       });
  cluster.sync();  // every partition's state is in its shared memory
  // Each block merges its share of the row's outputs over all partitions (as
  // combine_decode_row does), reading the others' shared memory; loads before any use.
  constexpr int kMax = kDecodeClusterMaxParts;
  T* out = static_cast<T*>(a.out) + (int64_t)row * a.out_stride + head0 * HD;
  const int n_out = heads * HD, share = (n_out + parts - 1) / parts;
  const int o1 = min(n_out, (rank + 1) * share);
  for (int idx = rank * share + (int)threadIdx.x; idx < o1; idx += blockDim.x) {
    const int g = idx / HD, d = idx % HD;
    float pm[kMax], pl[kMax], pa[kMax];
#pragma unroll
    for (int p = 0; p < kMax; ++p) {
      const bool in = p < parts;
      pm[p] = in ? *cluster.map_shared_rank(&part_mx[g], p) : -FLT_MAX;
      pl[p] = in ? *cluster.map_shared_rank(&part_den[g], p) : 0.0f;
      pa[p] = in ? *cluster.map_shared_rank(&part_num[g][d], p) : 0.0f;
    }
    float mx = -FLT_MAX;
#pragma unroll
    for (int p = 0; p < kMax; ++p)
      if (pl[p] > 0.0f) mx = fmaxf(mx, pm[p]);
    float num = 0.0f, den = 0.0f;
#pragma unroll
    for (int p = 0; p < kMax; ++p) {
      if (pl[p] == 0.0f) continue;
      const float w = __expf(pm[p] - mx);
      num += w * pa[p];
      den += w * pl[p];
    }
    out[idx] = from_f32<T>(den > 0.0f ? num / den : 0.0f);
  }
  cluster.sync();  // no block leaves while another still reads its shared memory
#else
  __trap();  // launched only on sm_90 and later (decode_rope_max_parts)
#endif
}

template <typename T, typename KV, int HD, int GMAX>
void configure_decode_rope() {
  static bool configured = false;  // per instantiation
  if (configured) return;
  auto* k = decode_rope_kernel<T, KV, HD, GMAX>;
  CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)decode_rope_smem<KV, HD, GMAX>()));
  CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  configured = true;
}

template <typename T, typename KV, int HD, int GMAX>
void launch_decode_rope(const AttnArgs& a, const DecodeRopeArgs& r, int rows, cudaStream_t s) {
  configure_decode_rope<T, KV, HD, GMAX>();
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3((unsigned)(rows * r.parts), (unsigned)(a.n_kv_heads * r.group_split));
  cfg.blockDim = dim3(32 * DecodeStage<KV, HD>::kWarps);
  cfg.dynamicSmemBytes = decode_rope_smem<KV, HD, GMAX>();
  cfg.stream = s;
  cudaLaunchAttribute attrs[2]{};
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = (unsigned)r.parts;
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attrs;
  cfg.numAttrs = a.prewait != 0 && programmatic_launch() ? 2 : 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, decode_rope_kernel<T, KV, HD, GMAX>, a, r));
}

template <typename T, typename KV, int HD>
void decode_rope_group(const AttnArgs& a, const DecodeRopeArgs& r, int rows, cudaStream_t s) {
  const int group = a.n_heads / a.n_kv_heads / r.group_split;  // query heads a block
  if (group <= 1)
    launch_decode_rope<T, KV, HD, 1>(a, r, rows, s);
  else if (group <= 2)
    launch_decode_rope<T, KV, HD, 2>(a, r, rows, s);
  else if (group <= 4)
    launch_decode_rope<T, KV, HD, 4>(a, r, rows, s);
  else
    launch_decode_rope<T, KV, HD, 8>(a, r, rows, s);
}

template <typename T, typename KV>
void decode_rope_hd(const AttnArgs& a, const DecodeRopeArgs& r, int rows, cudaStream_t s) {
  switch (a.head_dim) {
    case 32:
      return decode_rope_group<T, KV, 32>(a, r, rows, s);
    case 64:
      return decode_rope_group<T, KV, 64>(a, r, rows, s);
    case 128:
      return decode_rope_group<T, KV, 128>(a, r, rows, s);
    default:
      CHECK_MSG(false, "the fused decode attention supports head_dim 32, 64 and 128");
  }
}

}  // namespace

int decode_rope_max_parts() {
  static const int parts = [] {
    if (device_compute_major() < 9) return 0;
    // The widest form (head_dim 128, 8 query heads a KV head) asks the most of a cluster.
    using BF = __nv_bfloat16;
    configure_decode_rope<BF, BF, 128, 8>();
    for (int p : {kDecodeClusterMaxParts, 8}) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3((unsigned)p, 1);
      cfg.blockDim = dim3(32 * DecodeStage<BF, 128>::kWarps);
      cfg.dynamicSmemBytes = decode_rope_smem<BF, 128, 8>();
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = (unsigned)p;
      attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, decode_rope_kernel<BF, BF, 128, 8>, &cfg) ==
              cudaSuccess &&
          clusters > 0)
        return p;
      (void)cudaGetLastError();  // a refused size is not an error of the next call
    }
    return 0;
  }();
  return parts;
}

int decode_rope_parts(std::span<const int32_t> ctx_len, int n_kv_heads, int target_ctas,
                      int min_partition, int max_parts) {
  CHECK(!ctx_len.empty() && n_kv_heads > 0 && min_partition > 0 && max_parts >= 1);
  const int64_t base = (int64_t)ctx_len.size() * n_kv_heads;
  const int want = (int)std::max<int64_t>(1, (target_ctas + base - 1) / base);
  int parts = 1;
  for (int32_t c : ctx_len)
    parts = std::max(parts, std::clamp(ceil_div(c, min_partition), 1, want));
  return std::min(parts, max_parts);
}

void decode_rope_attention(const AttnArgs& a, const DecodeRopeArgs& r, int rows, cudaStream_t s) {
  CHECK(rows > 0 && r.parts >= 1 && r.parts <= kDecodeClusterMaxParts);
  CHECK(a.n_heads % a.n_kv_heads == 0 && a.n_heads / a.n_kv_heads <= 8);
  CHECK(r.group_split >= 1 && (a.n_heads / a.n_kv_heads) % r.group_split == 0);
  const bool bf = a.act_dtype == DType::bf16;
  CHECK(bf || a.act_dtype == DType::f16);
  CHECK(a.kv_dtype == DType::bf16 || a.kv_dtype == DType::f16);
  if (bf && a.kv_dtype == DType::bf16)
    decode_rope_hd<__nv_bfloat16, __nv_bfloat16>(a, r, rows, s);
  else if (bf)
    decode_rope_hd<__nv_bfloat16, __half>(a, r, rows, s);
  else if (a.kv_dtype == DType::bf16)
    decode_rope_hd<__half, __nv_bfloat16>(a, r, rows, s);
  else
    decode_rope_hd<__half, __half>(a, r, rows, s);
  CUDA_CHECK_LAUNCH();
}

}  // namespace infercept::cuda
