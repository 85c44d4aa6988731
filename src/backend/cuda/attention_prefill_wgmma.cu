// Prefill attention on Hopper's warpgroup tensor cores (see attention_prefill_wgmma.h).
//
// One CTA = one tile of 128 query rows x one query head, two warpgroups (256 threads), warpgroup
// w owning rows 64w .. 64w+63. Shared memory (dynamic, 161 KiB): Q [128][128] and two stages of
// K and V [128 keys][128], each a 32 KiB tile stored as two 64-column halves in the 128-byte
// swizzle layout that wgmma reads (wgmma.cuh): chunk c of row r of half h at
// h * 16 KiB + r * 128 + ((c ^ r) % 8) * 16. Per 128-key tile:
//   S[64 x 128] = Q K^T    8 x wgmma m64n128k16, Q and K both from shared memory (K-major)
//   online softmax on S in registers (exp2, quad shuffles for the row max), P packed to 16 bits
//   O[64 x 128] += P V     8 x wgmma m64n128k16, P from registers, V from shared memory read
//                          N-major (its rows are keys: the product's K), so V needs no transpose
// K and V tiles come through the block table with 16-byte cp.async by all 256 threads,
// double-buffered (tile j+1 loads while tile j computes; block-table entries a tile ahead).
// Keys at or past the partition's end are zero-filled and masked, as are keys before its
// start (a partition starts on a multiple of 64 keys, tiles on multiples of 128).
//
// Each product is waited for before the softmax or the next tile. FlashAttention-3's overlap
// within a warpgroup (tile j's S issued together with tile j-1's P V, three stages of K and V,
// 225 KiB) was built and measured slower on an H100 (2026-12-07: 245-288 against 320-372
// TFLOP/s on the prefill_attn_test cases; 255 registers, and the one CTA a multiprocessor
// still waits out each product's latency), so it is not kept. Left for later (its other
// steps): TMA loads, a producer warpgroup, and the two warpgroups' products taking turns by
// design rather than by the scheduler's interleaving.

#include "backend/cuda/attention_prefill_wgmma.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <mutex>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/wgmma.cuh"
#include "core/check.h"

namespace infercept::cuda {
namespace {

constexpr int kHd = 128;                  // head size
constexpr int kM = kPrefillTileM;         // query rows per CTA
[[maybe_unused]] constexpr int kN = 128;  // keys per tile
constexpr int kThreads = 256;             // two warpgroups
constexpr uint32_t kHalf = 128 * 128;     // bytes of one 64-column half of a 128-row tile
constexpr uint32_t kTile = 2 * kHalf;     // a 128 x 128 16-bit tile
constexpr int kStages = 2;                // K and V tiles in flight (double buffering)
// Q, K and V in each stage, and room to align to 1 KiB.
constexpr int kSmemBytes = (int)((1 + 2 * kStages) * kTile) + 1024;
static_assert(kM == 128, "two warpgroups of 64 rows");

// Byte offset of 16-byte chunk c (0..15) of row r (0..127) in a tile.
[[maybe_unused]] __device__ __forceinline__ uint32_t chunk_off(int r, int c) {
  return (uint32_t)(c >> 3) * kHalf + (uint32_t)r * 128u + ((uint32_t)((c ^ r) & 7) << 4);
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_wgmma_kernel(const AttnArgs a, const PrefillTile* __restrict__ tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr float kNegInf = -INFINITY;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t sQ = (raw + 1023u) & ~1023u;  // swizzle atoms are 1 KiB aligned
  const uint32_t sK = sQ + kTile, sV = sK + kStages * kTile;
  uint8_t* const pQ = smem_raw + (sQ - raw);
  uint8_t* const pK = pQ + kTile;
  uint8_t* const pV = pK + kStages * kTile;

  const PrefillTile tile = tiles[blockIdx.y];
  const int head = blockIdx.x;
  const int kvh = head / (a.n_heads / a.n_kv_heads);
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int qs0 = a.q_start[tile.seq];
  // Position of the tile's first row; row r of the tile sees keys [0, pos0 + r].
  const int pos0 = a.ctx_len[tile.seq] - a.q_len[tile.seq] + (tile.row0 - qs0);
  const int kbeg = tile.kbeg, kend = tile.kend;
  const int j0 = kbeg / kN, n_kt = (kend + kN - 1) / kN;
  const int unmasked_end = min(kend, pos0 + 1);  // keys below it are visible to every row
  const bool has_rows = wg * 64 < tile.nrows;    // a warpgroup past the rows only loads
  const int64_t kv_width = (int64_t)a.n_kv_heads * kHd;
  const int bs = a.block_size;
  const int32_t* __restrict__ bt = a.block_tables + (int64_t)tile.seq * a.max_blocks;
  const T* kc = static_cast<const T*>(a.k_cache) + kvh * kHd;
  const T* vc = static_cast<const T*>(a.v_cache) + kvh * kHd;

  // ---- Q tile -> shared (rows past nrows zero) ----
  {
    const T* q = static_cast<const T*>(a.q) + (int64_t)tile.row0 * a.q_stride + head * kHd;
#pragma unroll
    for (int i = 0; i < kM * 16 / kThreads; ++i) {
      const int idx = tid + i * kThreads, r = idx >> 4, c = idx & 15;
      const bool ok = r < tile.nrows;
      cp_async16(pQ + chunk_off(r, c), ok ? q + (int64_t)r * a.q_stride + c * 8 : q, ok);
    }
  }

  // ---- K/V tile loader: this thread's rows lrow + 16 i, chunk lchunk ----
  constexpr int kRows = kN * 16 / kThreads;  // rows of K and of V per thread per tile
  const int lrow = tid >> 4, lchunk = tid & 15;
  int blk[kRows];  // block-table entries for the tile the next issue() loads
  auto fetch = [&](int j) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int t = j * kN + lrow + 16 * i;
      blk[i] = t < kend ? __ldg(bt + t / bs) : 0;
    }
  };
  auto stage_of = [](int j) { return (uint32_t)(j % kStages) * kTile; };
  auto issue = [&](int j) {
    const uint32_t stage = stage_of(j);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int r = lrow + 16 * i, t = j * kN + r;
      const bool ok = t < kend;
      const int64_t off = ((int64_t)blk[i] * bs + t % bs) * kv_width + lchunk * 8;
      const uint32_t so = stage + chunk_off(r, lchunk);
      cp_async16(pK + so, ok ? kc + off : kc, ok);
      cp_async16(pV + so, ok ? vc + off : vc, ok);
    }
  };

  const float sl2 = a.scale * 1.4426950408889634f;  // softmax in base 2
  const int g = lane >> 2, tq = lane & 3;
  const int r0 = wg * 64 + warp * 16 + g;  // tile rows of my two accumulator rows: r0, r0 + 8
  const int prow0 = pos0 + r0, prow1 = prow0 + 8;
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m0 = kNegInf, m1 = kNegInf, l0 = 0.0f, l1 = 0.0f;  // raw-score max, partial sums

  // S = Q K^T of tile j (raw scores), waited for; first the fence that orders the registers
  // written since the last product (O rescaled) before it.
  auto qk = [&](int j, float(&s)[64]) {
    const uint32_t stage = stage_of(j);
#pragma unroll
    for (int i = 0; i < 64; ++i) s[i] = 0.0f;
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kHd / 16; ++kk) {
      const uint32_t koff = (uint32_t)(kk >> 2) * kHalf + (uint32_t)(kk & 3) * 32u;
      const uint64_t da = wgmma::desc_sw128(sQ + koff + (uint32_t)wg * 64u * 128u, 16, 1024);
      const uint64_t db = wgmma::desc_sw128(sK + stage + koff, 16, 1024);
      wgmma::mma_m64n128k16_ss<T, 0>(s, da, db, kk > 0);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(s);
  };
  // O += P V of tile j, waited for: V's rows (keys) are the product's K, its columns (head
  // dims) the N, read N-major (lbo steps between the two 64-column halves, sbo between 8-key
  // groups); first the fence that orders P's registers before it.
  auto pv = [&](int j, const uint32_t(&p)[kN / 16][4]) {
    const uint32_t stage = stage_of(j);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      const uint32_t addr = sV + stage + (uint32_t)kk * 16u * 128u;
      wgmma::mma_m64n128k16_rs<T, 1>(o, p[kk], wgmma::desc_sw128(addr, kHalf, 1024), 1);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(o);
  };
  // Masks: keys outside the partition, and keys after a row's position. tile_masked: whether
  // tile j holds a key some row does not see.
  auto hidden = [&](int t, int prow) { return t < kbeg || t >= kend || t > prow; };
  auto tile_masked = [&](int j) { return j * kN < kbeg || j * kN + kN > unmasked_end; };
  // Scores are masked in place once their product is done.
  auto mask_in_place = [&](int j, float(&s)[64]) {
    if (!tile_masked(j)) return;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int t = j * kN + 8 * i + 2 * tq + e;
        if (hidden(t, prow0)) s[4 * i + e] = kNegInf;
        if (hidden(t, prow1)) s[4 * i + 2 + e] = kNegInf;
      }
    }
  };
  // Updates the running max and sums from tile j's masked scores and writes P; returns the
  // factors by which O's two rows must be rescaled.
  auto softmax = [&](const float(&s)[64], uint32_t(&p)[kN / 16][4], float& corr0, float& corr1) {
    // Score e (0..3) of n8 tile i, s[4 i + e]: row g for e < 2, g + 8 above.
    // Rows g (scores 0..1 of each n8 tile) and g + 8 (2..3); a quad shares a row.
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      mx0 = fmaxf(mx0, fmaxf(s[4 * i + 0], s[4 * i + 1]));
      mx1 = fmaxf(mx1, fmaxf(s[4 * i + 2], s[4 * i + 3]));
    }
    mx0 = quad_max(mx0);
    mx1 = quad_max(mx1);
    // A row with nothing visible yet keeps max -inf: use 0 as its base (all its p are 0).
    const float base0 = mx0 == kNegInf ? 0.0f : mx0 * sl2;
    const float base1 = mx1 == kNegInf ? 0.0f : mx1 * sl2;
    corr0 = fast_exp2(m0 * sl2 - base0);
    corr1 = fast_exp2(m1 * sl2 - base1);
    m0 = mx0;
    m1 = mx1;
    float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const float p0 = fast_exp2(fmaf(s[4 * i + 0], sl2, -base0));
      const float p1 = fast_exp2(fmaf(s[4 * i + 1], sl2, -base0));
      const float p2 = fast_exp2(fmaf(s[4 * i + 2], sl2, -base1));
      const float p3 = fast_exp2(fmaf(s[4 * i + 3], sl2, -base1));
      rs0 += p0 + p1;
      rs1 += p2 + p3;
      p[i / 2][(i & 1) * 2 + 0] = pack2<T>(p0, p1);
      p[i / 2][(i & 1) * 2 + 1] = pack2<T>(p2, p3);
    }
    l0 = l0 * corr0 + rs0;
    l1 = l1 * corr1 + rs1;
  };
  auto rescale = [&](float corr0, float corr1) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      o[4 * i] *= corr0;
      o[4 * i + 1] *= corr0;
      o[4 * i + 2] *= corr1;
      o[4 * i + 3] *= corr1;
    }
  };

  fetch(j0);
  issue(j0);
  cp_async_commit();  // group: Q + the first key tile
  if (j0 + 1 < n_kt) fetch(j0 + 1);
  // Waits for tile j's loads, then queues tile j + 1's into the stage that every warpgroup is
  // done with: tile j - 1's.
  auto next_tile = [&](int j) {
    cp_async_wait<0>();
    wgmma::fence_proxy_async_shared();
    __syncthreads();
    if (j + 1 < n_kt) {
      issue(j + 1);
      cp_async_commit();
      if (j + 2 < n_kt) fetch(j + 2);
    }
  };

  for (int j = j0; j < n_kt; ++j) {
    next_tile(j);
    if (!has_rows) continue;
    float s[64];
    qk(j, s);
    mask_in_place(j, s);
    uint32_t p[kN / 16][4];  // P as A fragments, one per 16-key step
    float corr0, corr1;
    softmax(s, p, corr0, corr1);
    rescale(corr0, corr1);
    pv(j, p);
  }

  // ---- epilogue ----
  if (!has_rows) return;
  l0 = quad_sum(l0);
  l1 = quad_sum(l1);
  const int rows[2] = {r0, r0 + 8};
  if (tile.partial >= 0) {
    // A partition of a split tile: the unnormalized state, in the decode kernels' units
    // (scores scaled by `scale`, natural exponent: exp2((s - m) * sl2) = exp((s - m) * scale)).
    const float ms[2] = {m0, m1}, ls[2] = {l0, l1};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (rows[h] >= tile.nrows) continue;
      const int64_t pair = tile.partial + (int64_t)rows[h] * a.n_heads + head;
      float* dst = a.partial_acc + pair * kHd;
#pragma unroll
      for (int i = 0; i < 16; ++i)
        *reinterpret_cast<float2*>(dst + i * 8 + 2 * tq) =
            make_float2(o[4 * i + 2 * h], o[4 * i + 2 * h + 1]);
      if (tq == 0) {
        a.partial_ml[pair * 2] = ls[h] > 0.0f ? ms[h] * a.scale : -FLT_MAX;
        a.partial_ml[pair * 2 + 1] = ls[h];
      }
    }
    return;
  }
  const float inv[2] = {l0 > 0.0f ? 1.0f / l0 : 0.0f, l1 > 0.0f ? 1.0f / l1 : 0.0f};
  T* out = static_cast<T*>(a.out) + (int64_t)tile.row0 * a.out_stride + head * kHd;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (rows[h] >= tile.nrows) continue;
    T* row = out + (int64_t)rows[h] * a.out_stride;
#pragma unroll
    for (int i = 0; i < 16; ++i)
      *reinterpret_cast<uint32_t*>(row + i * 8 + 2 * tq) =
          pack2<T>(o[4 * i + 2 * h] * inv[h], o[4 * i + 2 * h + 1] * inv[h]);
  }
#else
  __trap();  // the host launches it only where sm_90a code was built (wgmma_prefill_built)
#endif
}

template <typename T>
void launch(const AttnArgs& a, const PrefillTile* d_tiles, int n_tiles, cudaStream_t s) {
  static std::once_flag configured;  // per instantiation
  std::call_once(configured, [] {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_wgmma_kernel<T>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  });
  dim3 grid((unsigned)a.n_heads, (unsigned)n_tiles);
  prefill_wgmma_kernel<T><<<grid, kThreads, kSmemBytes, s>>>(a, d_tiles);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool wgmma_prefill_built() {
  static const bool built = [] {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    if (prop.major != 9 || prop.minor != 0) return false;
    // The kernel as this device would load it: sm_90a machine code reports PTX 9.0; a JIT of
    // the sm_80 PTX (a build without 90a) reports 8.0 and holds only the trap.
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, prefill_wgmma_kernel<__nv_bfloat16>));
    return attr.ptxVersion >= 90 && prop.sharedMemPerBlockOptin >= (size_t)kSmemBytes;
  }();
  return built;
}

bool wgmma_prefill_handles(DType act, DType kv, int head_dim) {
  return head_dim == kHd && act == kv && (act == DType::bf16 || act == DType::f16) &&
         wgmma_prefill_built();
}

void attention_prefill_wgmma(const AttnArgs& a, const PrefillTile* d_tiles, int n_tiles,
                             cudaStream_t s) {
  if (n_tiles == 0) return;
  CHECK(n_tiles <= 65535);
  CHECK(wgmma_prefill_handles(a.act_dtype, a.kv_dtype, a.head_dim));
  return a.act_dtype == DType::bf16 ? launch<__nv_bfloat16>(a, d_tiles, n_tiles, s)
                                    : launch<__half>(a, d_tiles, n_tiles, s);
}

}  // namespace infercept::cuda
