#include "backend/cuda/attention.h"

#include <algorithm>
#include <cfloat>
#include <type_traits>

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/launch_mode.h"
#include "core/check.h"

namespace infercept::cuda {

namespace {
constexpr int kMaxPairs = 32;      // (row, head) pairs of one item
constexpr int kPairsPerWarp = 4;   // so at most 8 warps
constexpr int kTile = 32;          // keys per shared-memory tile (one per lane)
constexpr int kSplitMaxPairs = 8;  // items with at most this many pairs may be split
}  // namespace

int64_t attention_scratch_pairs(int n_kv_heads, int target_ctas) {
  // Split items have at most kSplitMaxPairs / group rows, so rows * n_heads <= 8 * n_kv.
  // While the tiles alone leave the chip idle (tiles * n_kv < target), every split tile is
  // longer than the partition length L ~ mean keys / ceil(target / (tiles * n_kv)), so its
  // parts are under 2 x its keys / L and all parts together under 2 x tiles x ceil(..) <
  // 4 x target / n_kv. Past that, plan_attention gives up splitting what does not fit.
  const int64_t max_parts = 4LL * target_ctas / std::max(1, n_kv_heads) + 1;
  return max_parts * kSplitMaxPairs * n_kv_heads;
}

AttnPlan plan_attention(std::span<const int32_t> q_start, std::span<const int32_t> q_len,
                        std::span<const int32_t> ctx_len, int n_heads, int n_kv_heads,
                        int target_ctas, int min_partition) {
  CHECK(min_partition >= kTile && min_partition % kTile == 0);
  const int group = n_heads / n_kv_heads;
  CHECK(group >= 1 && group <= kMaxPairs && n_heads % n_kv_heads == 0);
  const int rows_per_item = std::max(1, kMaxPairs / group);
  AttnPlan plan;
  struct Tile {
    int seq, row0, nrows, kend;
  };
  std::vector<Tile> tiles;
  for (size_t s = 0; s < q_start.size(); ++s) {
    for (int r = 0; r < q_len[s]; r += rows_per_item) {
      const int nrows = std::min(rows_per_item, q_len[s] - r);
      // Causal: the tile's last row sees keys [0, ctx - q_len + r + nrows).
      tiles.push_back({(int)s, q_start[s] + r, nrows, ctx_len[s] - q_len[s] + r + nrows});
    }
  }
  const int64_t base_ctas = (int64_t)tiles.size() * n_kv_heads;
  const int64_t scratch = attention_scratch_pairs(n_kv_heads, target_ctas);
  const int want =
      base_ctas > 0 ? (int)std::max<int64_t>(1, (target_ctas + base_ctas - 1) / base_ctas) : 1;
  for (const Tile& t : tiles) {
    const int pairs = t.nrows * group;
    int parts = 1;
    if (pairs <= kSplitMaxPairs) {
      if (base_ctas < target_ctas)  // ceil(target / blocks) parts a row
        parts = std::clamp((t.kend + min_partition - 1) / min_partition, 1, want);
      const int64_t need = (int64_t)parts * t.nrows * n_heads;
      if (parts > 1 && plan.partial_pairs + need > scratch) parts = 1;
    }
    // Lone rows (decode) go to the decode kernel, which needs at most 8 heads per KV head.
    std::vector<AttnItem>& dst = t.nrows == 1 && group <= 8 ? plan.decode_items : plan.items;
    if (&dst == &plan.items) plan.max_pairs = std::max(plan.max_pairs, pairs);
    if (parts == 1) {
      dst.push_back({t.seq, t.row0, t.nrows, 0, t.kend, -1, -1});
      continue;
    }
    const bool decode = &dst == &plan.decode_items;
    std::vector<AttnCombine>& combines = decode ? plan.decode_combines : plan.combines;
    const int combine = decode ? (int)combines.size() : -1;
    const int span = ((t.kend + parts - 1) / parts + kTile - 1) / kTile * kTile;
    AttnCombine c{t.row0, t.nrows, plan.partial_pairs, 0};
    for (int k0 = 0; k0 < t.kend; k0 += span) {
      dst.push_back(
          {t.seq, t.row0, t.nrows, k0, std::min(t.kend, k0 + span), plan.partial_pairs, combine});
      plan.partial_pairs += t.nrows * n_heads;
      ++c.n_parts;
    }
    combines.push_back(c);
  }
  return plan;
}

namespace {

// The element the general kernel stages K and V in: the cache's own, or for an fp8 cache the
// dequantized float (code x its token and head's scale, the CPU oracle's value).
template <typename KV>
using StagedKv = std::conditional_t<kIsFp8<KV>, float, KV>;

template <typename T, typename KV, int HD>
__global__ void attention_kernel(AttnArgs a) {
  pdl_launch_dependents();       // the output projection (a GEMV at batch 1) may start its loads
  constexpr int kPer = HD / 32;  // output dims per lane
  using SK = StagedKv<KV>;
  extern __shared__ unsigned char smem_raw[];
  float* qs = reinterpret_cast<float*>(smem_raw);       // [32][HD]
  SK* kt = reinterpret_cast<SK*>(qs + kMaxPairs * HD);  // [HD][kTile + 2]
  SK* vs = kt + HD * (kTile + 2);                       // [kTile][HD]

  const AttnItem it = a.items[blockIdx.x];
  const int kvh = blockIdx.y;
  const int group = a.n_heads / a.n_kv_heads;
  const int npairs = it.nrows * group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  [[maybe_unused]] const int kv_width = a.n_kv_heads * HD;
  const int qs0 = a.q_start[it.seq];
  const int pos0 = a.ctx_len[it.seq] - a.q_len[it.seq];
  const int32_t* bt = a.block_tables + (int64_t)it.seq * a.max_blocks;

  const T* q = static_cast<const T*>(a.q);
  for (int idx = threadIdx.x; idx < npairs * HD; idx += blockDim.x) {
    const int p = idx / HD, d = idx % HD;
    const int row = it.row0 + p / group, head = kvh * group + p % group;
    qs[p * HD + d] = to_f32(q[(int64_t)row * a.q_stride + head * HD + d]) * a.scale;
  }

  float m[kPairsPerWarp], l[kPairsPerWarp], acc[kPairsPerWarp][kPer];
  int pos[kPairsPerWarp];
#pragma unroll
  for (int k = 0; k < kPairsPerWarp; ++k) {
    m[k] = -FLT_MAX;
    l[k] = 0.0f;
    const int p = warp + nw * k;
    pos[k] = pos0 + (it.row0 + p / group - qs0);
#pragma unroll
    for (int i = 0; i < kPer; ++i) acc[k][i] = 0.0f;
  }

  [[maybe_unused]] const KV* kc = static_cast<const KV*>(a.k_cache);
  [[maybe_unused]] const KV* vc = static_cast<const KV*>(a.v_cache);
  for (int t0 = it.kbeg; t0 < it.kend; t0 += kTile) {
    __syncthreads();
    constexpr int kVec = 4;  // elements per load
    for (int idx = threadIdx.x; idx < kTile * HD / kVec; idx += blockDim.x) {
      const int t = idx / (HD / kVec), d = (idx % (HD / kVec)) * kVec;
      const int tok = t0 + t;
      if constexpr (kIsFp8<KV>) {
        float kf[kVec] = {}, vf[kVec] = {};
        if (tok < it.kend) {
          const Fp8Layout lay(a.block_size, a.n_kv_heads, HD);
          const int64_t block = bt[tok / a.block_size];
          const int row = tok % a.block_size;
          const char* kb = static_cast<const char*>(a.k_cache);
          const char* vb = static_cast<const char*>(a.v_cache);
          const int64_t off = lay.codes(block, row, kvh) + d, so = lay.scale(block, row, kvh);
          fp8x4_to_f32(*reinterpret_cast<const uint32_t*>(kb + off), kf);
          fp8x4_to_f32(*reinterpret_cast<const uint32_t*>(vb + off), vf);
          const float ks = *reinterpret_cast<const float*>(kb + so);
          const float vsc = *reinterpret_cast<const float*>(vb + so);
#pragma unroll
          for (int i = 0; i < kVec; ++i) {
            kf[i] *= ks;
            vf[i] *= vsc;
          }
        }
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          kt[(d + i) * (kTile + 2) + t] = kf[i];
          vs[t * HD + d + i] = vf[i];
        }
      } else {
        uint2 kw = make_uint2(0, 0), vw = make_uint2(0, 0);
        if (tok < it.kend) {
          const int64_t slot = (int64_t)bt[tok / a.block_size] * a.block_size + tok % a.block_size;
          const int64_t off = slot * kv_width + kvh * HD + d;
          kw = *reinterpret_cast<const uint2*>(kc + off);
          vw = *reinterpret_cast<const uint2*>(vc + off);
        }
        const KV* ke = reinterpret_cast<const KV*>(&kw);
#pragma unroll
        for (int i = 0; i < kVec; ++i) kt[(d + i) * (kTile + 2) + t] = ke[i];
        *reinterpret_cast<uint2*>(vs + t * HD + d) = vw;
      }
    }
    __syncthreads();
    const int tok = t0 + lane;
#pragma unroll
    for (int k = 0; k < kPairsPerWarp; ++k) {
      const int p = warp + nw * k;
      if (p >= npairs) break;
      const float* qp = qs + p * HD;
      float s = 0.0f;
#pragma unroll 16
      for (int d = 0; d < HD; ++d) s += qp[d] * to_f32(kt[d * (kTile + 2) + lane]);
      const bool valid = tok < it.kend && tok <= pos[k];
      s = valid ? s : -FLT_MAX;
      float tmax = s;
      for (int o = 16; o > 0; o >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffff, tmax, o));
      if (tmax == -FLT_MAX) continue;  // every key of this tile is masked for this row
      const float m_new = fmaxf(m[k], tmax);
      const float pe = valid ? __expf(s - m_new) : 0.0f;
      const float corr = __expf(m[k] - m_new);
      float psum = pe;
      for (int o = 16; o > 0; o >>= 1) psum += __shfl_xor_sync(0xffffffff, psum, o);
      l[k] = l[k] * corr + psum;
      m[k] = m_new;
#pragma unroll
      for (int i = 0; i < kPer; ++i) acc[k][i] *= corr;
      for (int j = 0; j < kTile; ++j) {
        const float pj = __shfl_sync(0xffffffff, pe, j);
#pragma unroll
        for (int i = 0; i < kPer; ++i) acc[k][i] += pj * to_f32(vs[j * HD + lane + 32 * i]);
      }
    }
  }

  T* out = static_cast<T*>(a.out);
#pragma unroll
  for (int k = 0; k < kPairsPerWarp; ++k) {
    const int p = warp + nw * k;
    if (p >= npairs) break;
    const int rl = p / group, head = kvh * group + p % group;
    if (it.partial < 0) {
      const float inv = l[k] > 0.0f ? 1.0f / l[k] : 0.0f;
      T* o = out + (int64_t)(it.row0 + rl) * a.out_stride + head * HD;
#pragma unroll
      for (int i = 0; i < kPer; ++i) o[lane + 32 * i] = from_f32<T>(acc[k][i] * inv);
    } else {
      const int64_t pair = it.partial + rl * a.n_heads + head;
#pragma unroll
      for (int i = 0; i < kPer; ++i) a.partial_acc[pair * HD + lane + 32 * i] = acc[k][i];
      if (lane == 0) {
        a.partial_ml[pair * 2] = l[k] > 0.0f ? m[k] : -FLT_MAX;
        a.partial_ml[pair * 2 + 1] = l[k];
      }
    }
  }
}

// The merge of a split row's partitions, by the partition that finished last. Loads go out
// 16 parts at a time, all before any is used: a loop of dependent L2 reads here is the
// kernel's tail, which the whole step waits for at batch 1.
template <typename T, int HD>
__device__ void combine_decode_row(const AttnArgs& a, const AttnCombine& c, int kvh, int group) {
  constexpr int kBatch = 16;
  T* out = static_cast<T*>(a.out);
  for (int idx = threadIdx.x; idx < group * HD; idx += blockDim.x) {
    const int head = kvh * group + idx / HD, d = idx % HD;
    float mx = -FLT_MAX, num = 0.0f, den = 0.0f;
    for (int p0 = 0; p0 < c.n_parts; p0 += kBatch) {
      float pm[kBatch], pl[kBatch], pa[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const bool in = p0 + k < c.n_parts;
        const int64_t pair = c.partial + (int64_t)(in ? p0 + k : p0) * a.n_heads + head;
        pm[k] = __ldcg(a.partial_ml + pair * 2);
        pl[k] = in ? __ldcg(a.partial_ml + pair * 2 + 1) : 0.0f;
        pa[k] = __ldcg(a.partial_acc + pair * HD + d);
      }
      float bm = mx;
#pragma unroll
      for (int k = 0; k < kBatch; ++k)
        if (pl[k] > 0.0f) bm = fmaxf(bm, pm[k]);
      const float corr = __expf(mx - bm);  // 0 while nothing was counted (mx = -FLT_MAX)
      num *= corr;
      den *= corr;
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        if (pl[k] == 0.0f) continue;
        const float w = __expf(pm[k] - bm);
        num += w * pa[k];
        den += w * pl[k];
      }
      mx = bm;
    }
    out[(int64_t)c.row0 * a.out_stride + head * HD + d] =
        from_f32<T>(den > 0.0f ? num / den : 0.0f);
  }
}

// The decode kernel's shared memory, all of it dynamic so that the warps' stages start the
// block's shared memory: the stages (then the merge buffer), the scaled query heads, the
// warps' softmax maxima and sums, the split row's ticket. With the query heads and the rest
// as static shared memory, which sits before the dynamic, the cp.async copies into the
// stages made L2 serve every KV sector twice (47% of them hits, where the blocks took the
// 228 KB shared split) and the kernel ran at 3.1 TB/s instead of 4.0 on the H200 at batch 32
// (PERF 4.5u; the cause inside the memory system is not known, the layout is what was
// measured). attend_project and decode_rope_kernel keep the same layout.
template <typename KV, int HD, int GMAX, int W>
struct DecodeKernelSmem {
  static constexpr size_t kQs = DecodeStage<KV, HD, W>::kBytes;           // float [GMAX][HD]
  static constexpr size_t kWml = kQs + sizeof(float) * GMAX * HD;         // float [2][W][GMAX]
  static constexpr size_t kTicket = kWml + sizeof(float) * 2 * W * GMAX;  // int
  static constexpr size_t kBytes = kTicket + 16;
};

template <typename T, typename KV, int HD, int GMAX, int W>
__global__ void __launch_bounds__(32 * W) decode_kernel(AttnArgs a) {
  pdl_launch_dependents();  // the output projection (a GEMV at batch 1) may start its loads
  using Stage = DecodeStage<KV, HD, W>;
  constexpr int kWarps = Stage::kWarps, kPer = HD / 32;
  using Smem = DecodeKernelSmem<KV, HD, GMAX, W>;
  extern __shared__ uint4 stage_raw[];  // [kWarps][K, V][32 rows] of pieces; then merge buffer
  unsigned char* smem = reinterpret_cast<unsigned char*>(stage_raw);
  auto qs = reinterpret_cast<float(*)[HD]>(smem + Smem::kQs);
  float* wml = reinterpret_cast<float*>(smem + Smem::kWml);
  int& ticket = *reinterpret_cast<int*>(smem + Smem::kTicket);
  // Without prewait everything waits for the previous kernel (a no-op when not launched as
  // its programmatic dependent).
  if (!a.prewait) pdl_wait();
  const AttnItem it = a.items[blockIdx.x];
  const int kvh = blockIdx.y;
  const int group = a.n_heads / a.n_kv_heads;
  const int warp = threadIdx.x / 32;
  const int32_t* bt = a.block_tables + (int64_t)it.seq * a.max_blocks;

  float m[GMAX], l[GMAX], acc[GMAX][kPer];
  clear_softmax_state(m, l, acc);
  uint4* my_stage = stage_raw + warp * Stage::kWarpPieces;
  // With prewait, this warp's first chunk goes out before the wait when every key it reads
  // (up to the item's last, which padding lanes repeat) is older than this step's rows: the
  // kernel before (RoPE + store) writes only those.
  const int first_c0 = it.kbeg + warp * 32;
  bool first_issued = false;
  if (a.prewait && first_c0 < it.kend &&
      min(first_c0 + 31, it.kend - 1) < a.ctx_len[it.seq] - a.q_len[it.seq]) {
    issue_decode_chunk<KV, HD>(a, bt, kvh, it.kend, first_c0, my_stage);
    first_issued = true;
  }
  pdl_wait();
  const T* q = static_cast<const T*>(a.q) + (int64_t)it.row0 * a.q_stride + kvh * group * HD;
  for (int i = threadIdx.x; i < GMAX * HD; i += blockDim.x)
    qs[i / HD][i % HD] = i / HD < group ? to_f32(q[i]) * a.scale : 0.0f;
  __syncthreads();  // qs
  decode_warp_chunks<KV, HD, GMAX, W>(a, bt, kvh, it.kend, first_c0, first_issued, qs, my_stage, m,
                                      l, acc);
  T* out = static_cast<T*>(a.out);
  decode_block_state<HD, GMAX, kWarps>(stage_raw, wml, group, m, l, acc,
                                       [&](int g, int d, float num, float den, float mx) {
                                         const int head = kvh * group + g;
                                         if (it.partial < 0) {
                                           out[(int64_t)it.row0 * a.out_stride + head * HD + d] =
                                               from_f32<T>(den > 0.0f ? num / den : 0.0f);
                                         } else {
                                           const int64_t pair = it.partial + head;
                                           a.partial_acc[pair * HD + d] = num;
                                           if (d == 0) {
                                             a.partial_ml[pair * 2] = den > 0.0f ? mx : -FLT_MAX;
                                             a.partial_ml[pair * 2 + 1] = den;
                                           }
                                         }
                                       });
  if (it.combine < 0) return;
  // Split row: publish this partition's state, then count it in; the partition that counts
  // last sees every other's state (fence before the count, L2 reads after) and merges them.
  // It resets the counter, so the counters are zero again for the next launch (and graph).
  __threadfence();
  __syncthreads();
  int* counter = a.combine_counters + (int64_t)it.combine * a.n_kv_heads + kvh;
  const AttnCombine c = a.decode_combines[it.combine];
  if (threadIdx.x == 0) ticket = atomicAdd(counter, 1);
  __syncthreads();
  if (ticket != c.n_parts - 1) return;
  __threadfence();
  combine_decode_row<T, HD>(a, c, kvh, group);
  if (threadIdx.x == 0) *counter = 0;
}

// One block per (combine, head, row of the combine); thread d owns one output dimension.
// Rows past a combine's own count exit at once (grid.z is the largest row count).
template <typename T>
__global__ void combine_kernel(AttnArgs a) {
  pdl_launch_dependents();  // the output projection (a GEMV at batch 1) may start its loads
  const AttnCombine c = a.combines[blockIdx.x];
  const int head = blockIdx.y, hd = a.head_dim, rl = blockIdx.z;
  if (rl >= c.nrows) return;
  T* out = static_cast<T*>(a.out);
  auto pair_of = [&](int p) {
    return c.partial + (int64_t)p * c.nrows * a.n_heads + rl * a.n_heads + head;
  };
  float mx = -FLT_MAX;
  for (int p = 0; p < c.n_parts; ++p) {
    const int64_t pair = pair_of(p);
    if (a.partial_ml[pair * 2 + 1] > 0.0f) mx = fmaxf(mx, a.partial_ml[pair * 2]);
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    for (int p = 0; p < c.n_parts; ++p) {
      const int64_t pair = pair_of(p);
      const float l = a.partial_ml[pair * 2 + 1];
      if (l == 0.0f) continue;
      const float w = __expf(a.partial_ml[pair * 2] - mx);
      num += w * a.partial_acc[pair * hd + d];
      den += w * l;
    }
    out[(int64_t)(c.row0 + rl) * a.out_stride + head * hd + d] =
        from_f32<T>(den > 0.0f ? num / den : 0.0f);
  }
}

// Combines `n` of `a`'s partial states into `out`, none of more than `max_rows` rows.
template <typename T>
void launch_combine(const AttnArgs& a, const AttnCombine* combines, int n, int max_rows,
                    cudaStream_t s) {
  CHECK(a.head_dim <= 128 && n <= 65535 && max_rows >= 1 && max_rows <= 65535);
  AttnArgs c = a;
  c.combines = combines;
  c.n_combines = n;
  const dim3 grid((unsigned)n, (unsigned)a.n_heads, (unsigned)max_rows);
  combine_kernel<T><<<grid, a.head_dim, 0, s>>>(c);
  CUDA_CHECK_LAUNCH();
}

// Four warps a block, three blocks a multiprocessor. Six warps (two blocks) were 7-13% faster
// at batch 32-128 while the kernel's small arrays were static shared memory and are as fast
// as four since they follow the stages (DecodeKernelSmem).
constexpr int kDecodeWarps = 4;

// Calls f(std::integral_constant<int, GMAX>{}) with the decode kernel's room for a query group
// of `group` heads (1, 2, 4 or 8).
template <typename F>
auto with_decode_group(int group, F&& f) {
  if (group <= 1) return f(std::integral_constant<int, 1>{});
  if (group <= 2) return f(std::integral_constant<int, 2>{});
  if (group <= 4) return f(std::integral_constant<int, 4>{});
  return f(std::integral_constant<int, 8>{});
}

// The decode kernel for these types, head size and group room, its shared memory allowed
// (once per instantiation); returns its dynamic shared memory in bytes.
template <typename T, typename KV, int HD, int GMAX>
size_t configure_decode() {
  constexpr size_t smem = DecodeKernelSmem<KV, HD, GMAX, kDecodeWarps>::kBytes;
  static_assert(
      sizeof(float) * kDecodeWarps * GMAX * HD <= DecodeStage<KV, HD, kDecodeWarps>::kBytes,
      "the merge buffer reuses the value stages");
  static bool configured = false;
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(decode_kernel<T, KV, HD, GMAX, kDecodeWarps>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    configured = true;
  }
  return smem;
}

template <typename T, typename KV, int HD, int GMAX>
void launch_decode(const AttnArgs& a, dim3 grid, cudaStream_t s) {
  const size_t smem = configure_decode<T, KV, HD, GMAX>();
  launch_kernel(decode_kernel<T, KV, HD, GMAX, kDecodeWarps>, grid, dim3(32 * kDecodeWarps), smem,
                s, a.prewait != 0 && programmatic_launch(), a);
}

template <typename T, typename KV, int HD>
void launch(const AttnArgs& a, cudaStream_t s) {
  if (a.n_items > 0) {
    // Enough warps that every pair is covered: pairs p = warp + warps * k, k < 4.
    // One warp per pair up to 8; beyond that each of 8 warps takes up to kPairsPerWarp
    // (pairs p = warp + 8k), which covers kMaxPairs = 32.
    const int nw = std::clamp(a.max_pairs, 1, 8);
    const size_t smem = sizeof(float) * kMaxPairs * HD + sizeof(StagedKv<KV>) * HD * (kTile + 2) +
                        sizeof(StagedKv<KV>) * kTile * HD;
    static bool configured = false;  // per instantiation
    if (!configured) {
      CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<T, KV, HD>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
      configured = true;
    }
    dim3 grid((unsigned)a.n_items, (unsigned)a.n_kv_heads);
    attention_kernel<T, KV, HD><<<grid, 32 * nw, smem, s>>>(a);
    CUDA_CHECK_LAUNCH();
  }
  if (a.n_decode_items > 0) {
    AttnArgs d = a;
    d.items = a.decode_items;
    dim3 grid((unsigned)a.n_decode_items, (unsigned)a.n_kv_heads);
    with_decode_group(a.n_heads / a.n_kv_heads, [&](auto gmax) {
      launch_decode<T, KV, HD, decltype(gmax)::value>(d, grid, s);
    });
  }
  if (a.n_combines > 0) launch_combine<T>(a, a.combines, a.n_combines, kMaxPairs, s);
}

template <typename T, typename KV>
void launch_hd(const AttnArgs& a, cudaStream_t s) {
  switch (a.head_dim) {
    case 32:
      return launch<T, KV, 32>(a, s);
    case 64:
      return launch<T, KV, 64>(a, s);
    case 128:
      return launch<T, KV, 128>(a, s);
    default:
      CHECK_MSG(false, "CUDA attention supports head_dim 32, 64 and 128");
  }
}

template <typename T, typename KV>
int decode_blocks_per_sm_typed(int head_dim, int group) {
  auto by_group = [&](auto hd) {
    return with_decode_group(group, [](auto gmax) {
      constexpr int HD = decltype(hd)::value, GMAX = decltype(gmax)::value;
      const size_t smem = configure_decode<T, KV, HD, GMAX>();
      int n = 0;
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &n, decode_kernel<T, KV, HD, GMAX, kDecodeWarps>, 32 * kDecodeWarps, smem));
      return std::max(1, n);
    });
  };
  if (head_dim == 32) return by_group(std::integral_constant<int, 32>{});
  if (head_dim == 64) return by_group(std::integral_constant<int, 64>{});
  return by_group(std::integral_constant<int, 128>{});
}

}  // namespace

int decode_blocks_per_sm(DType act, DType kv, int head_dim, int group) {
  CHECK(head_dim == 32 || head_dim == 64 || head_dim == 128);
  const bool bf = act == DType::bf16;
  if (kv == DType::fp8_e4m3)
    return bf ? decode_blocks_per_sm_typed<__nv_bfloat16, Fp8E4m3>(head_dim, group)
              : decode_blocks_per_sm_typed<__half, Fp8E4m3>(head_dim, group);
  if (bf && kv == DType::bf16)
    return decode_blocks_per_sm_typed<__nv_bfloat16, __nv_bfloat16>(head_dim, group);
  if (bf) return decode_blocks_per_sm_typed<__nv_bfloat16, __half>(head_dim, group);
  if (kv == DType::bf16) return decode_blocks_per_sm_typed<__half, __nv_bfloat16>(head_dim, group);
  return decode_blocks_per_sm_typed<__half, __half>(head_dim, group);
}

void attention_combine(const AttnArgs& a, const AttnCombine* d_combines, int n_combines,
                       int max_rows, cudaStream_t s) {
  if (n_combines == 0) return;
  if (a.act_dtype == DType::bf16)
    launch_combine<__nv_bfloat16>(a, d_combines, n_combines, max_rows, s);
  else
    launch_combine<__half>(a, d_combines, n_combines, max_rows, s);
}

void attention(const AttnArgs& a, cudaStream_t s) {
  if (a.n_items == 0 && a.n_decode_items == 0) return;
  CHECK(a.max_pairs <= kMaxPairs);
  const bool bf = a.act_dtype == DType::bf16;
  CHECK(bf || a.act_dtype == DType::f16);
  CHECK(a.kv_dtype == DType::bf16 || a.kv_dtype == DType::f16 || a.kv_dtype == DType::fp8_e4m3);
  if (a.kv_dtype == DType::fp8_e4m3)
    return bf ? launch_hd<__nv_bfloat16, Fp8E4m3>(a, s) : launch_hd<__half, Fp8E4m3>(a, s);
  if (bf && a.kv_dtype == DType::bf16) return launch_hd<__nv_bfloat16, __nv_bfloat16>(a, s);
  if (bf) return launch_hd<__nv_bfloat16, __half>(a, s);
  if (a.kv_dtype == DType::bf16) return launch_hd<__half, __nv_bfloat16>(a, s);
  return launch_hd<__half, __half>(a, s);
}

}  // namespace infercept::cuda
