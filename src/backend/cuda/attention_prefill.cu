// Tensor-core flash attention for prefill over the paged KV cache (see attention_prefill.h).
//
// One CTA = one tile of kM = 128 query rows x one query head, 8 warps (256 threads), warp w
// owns query rows 16w .. 16w+15 of the tile. Shared memory (dynamic): Q [128][HD] plus two
// stages of K and V [64][HD], 16-bit: 96 KiB at HD 128, 48 KiB at 64. Per 64-key tile (kN):
//   S[16 x 64] = Q[16 x HD] K^T      mma.sync m16n8k16, Q fragments kept in registers
//   online softmax on S in registers (exp2, quad shuffles for the row max)
//   O[16 x HD] += P[16 x 64] V      P re-packed from the S accumulators as A fragments
// K and V tiles come through the block table with 16-byte cp.async into XOR-swizzled shared
// memory (conflict-free ldmatrix), double-buffered: tile j+1 loads while tile j computes,
// and the block-table entries for tile j+2 are fetched a tile ahead. Tokens at or past the
// tile's last key position are zero-filled, never read, so NaN garbage in unused slots or
// out-of-range block-table entries can not leak in.
// An fp8 cache's tiles come as codes and scales into stages of their own and are dequantized
// into the 16-bit tiles (the activation type's) before the products, which run as above.

#include "backend/cuda/attention_prefill.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/attention_prefill_wgmma.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/mma.cuh"
#include "core/check.h"

namespace infercept::cuda {

PrefillPlan plan_prefill(std::span<const int32_t> q_start, std::span<const int32_t> q_len,
                         std::span<const int32_t> ctx_len, int n_heads, int min_q_len,
                         int target_ctas, int64_t partial_base, int64_t partial_limit,
                         int min_partition) {
  CHECK(q_start.size() == q_len.size() && q_len.size() == ctx_len.size());
  CHECK(n_heads >= 1 && min_partition >= 64 && min_partition % 64 == 0);
  std::vector<PrefillTile> tiles;
  const int min_len = std::max(1, min_q_len);
  for (size_t s = 0; s < q_len.size(); ++s) {
    if (q_len[s] < min_len) continue;
    CHECK(ctx_len[s] >= q_len[s]);
    for (int r = 0; r < q_len[s]; r += kPrefillTileM) {
      const int nrows = std::min(kPrefillTileM, q_len[s] - r);
      const int kend = ctx_len[s] - q_len[s] + r + nrows;  // keys the tile's last row sees
      tiles.push_back({(int32_t)s, q_start[s] + r, nrows, 0, kend, -1});
    }
  }
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const PrefillTile& x, const PrefillTile& y) { return x.kend > y.kend; });
  PrefillPlan plan;
  // Parts per tile: as many as keep every tile's parts within one wave of the chip.
  const int64_t base_ctas = (int64_t)tiles.size() * n_heads;
  const int want = base_ctas > 0 ? (int)std::min<int64_t>(target_ctas / base_ctas, 1 << 16) : 1;
  if (want < 2) {
    plan.tiles = std::move(tiles);
    return plan;
  }
  int64_t next = partial_base;
  for (const PrefillTile& t : tiles) {
    int parts = std::clamp((t.kend + min_partition - 1) / min_partition, 1, want);
    if (parts > 1 && next + (int64_t)parts * t.nrows * n_heads > partial_limit) parts = 1;
    if (parts == 1) {
      plan.tiles.push_back(t);
      continue;
    }
    // Whole 64-key tiles per partition, so only the last one meets the diagonal.
    const int span = ((t.kend + parts - 1) / parts + 63) / 64 * 64;
    AttnCombine c{t.row0, t.nrows, (int32_t)next, 0};
    for (int k0 = 0; k0 < t.kend; k0 += span) {
      PrefillTile p = t;
      p.kbeg = k0;
      p.kend = std::min(t.kend, k0 + span);
      p.partial = (int32_t)next;
      plan.tiles.push_back(p);
      next += (int64_t)t.nrows * n_heads;
      ++c.n_parts;
    }
    plan.combines.push_back(c);
    plan.max_combine_rows = std::max(plan.max_combine_rows, t.nrows);
  }
  // Longest partitions first again (a split tile's parts are shorter than a whole one).
  std::stable_sort(
      plan.tiles.begin(), plan.tiles.end(),
      [](const PrefillTile& x, const PrefillTile& y) { return x.kend - x.kbeg > y.kend - y.kbeg; });
  plan.partial_pairs = (int32_t)(next - partial_base);
  return plan;
}

int64_t prefill_scratch_pairs(int target_ctas) {
  return (int64_t)std::max(1, target_ctas) * kPrefillTileM;
}

bool prefill_supports_head_dim(int head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 128;
}

namespace {

constexpr int kM = kPrefillTileM;  // query rows per CTA
constexpr int kN = 64;             // keys per tile
constexpr int kWarps = kM / 16;
constexpr int kThreads = kWarps * 32;
// Dynamic shared memory of a block: Q [kM][hd] and two stages of K and V [kN][hd], 16-bit; an
// fp8 cache adds two stages of K and V codes [kN][hd] and their scales [kN] (fp8).
constexpr int smem_bytes(int hd, bool fp8 = false) {
  return (kM + 4 * kN) * hd * 2 + (fp8 ? 4 * kN * hd + 4 * kN * 4 : 0);
}
static_assert(kM % 16 == 0 && kN % 16 == 0);

// Shared-memory tiles are rows of HD/8 16-byte chunks; chunk c of row r is stored at
// chunk c ^ f(r), so the 8 rows that one ldmatrix 8x8 matrix reads hit 8 different
// 16-byte bank groups.
template <int HD>
__device__ __forceinline__ int swz(int row, int chunk) {
  if constexpr (HD >= 64) {
    return row * (HD / 8) + (chunk ^ (row & 7));
  } else {  // 4 chunks (64 bytes) per row: two rows share a 128-byte line
    return row * (HD / 8) + (chunk ^ ((row >> 1) & 3));
  }
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// An fp8 cache's K and V tiles come as codes (16 to a 16-byte chunk, HD / 16 chunks a row) into
// stages of their own, and each tile is turned into the 16-bit tiles above (code x scale,
// rounded to T) before its products, which then run as for a 16-bit cache. Code chunk c of row
// r sits at code_slot(r, c); conversion item i takes chunk code_chunk_of(i): 8 items in a row
// (one 128-byte phase of shared accesses) read 8 bank groups and store 8 (two rows of four
// chunks, one row even and one odd, so that the swizzle of the 16-bit tiles spreads them).
template <int HD>
__device__ __forceinline__ int code_slot(int row, int chunk) {
  constexpr int kChunks = HD / 16;
  if constexpr (kChunks == 8) return row * kChunks + (chunk ^ ((row & 1) << 2));
  return row * kChunks + chunk;
}
template <int HD>
__device__ __forceinline__ void code_chunk_of(int item, int& row, int& chunk) {
  constexpr int kChunks = HD / 16;
  if constexpr (kChunks >= 4) {
    chunk = (item & 3) + 4 * ((item >> 3) % (kChunks / 4));
    row = ((item >> 2) & 1) + 2 * (item / (8 * (kChunks / 4)));
  } else {
    chunk = item % kChunks;
    row = item / kChunks;
  }
}
// 16 codes times `scale`, as two 16-byte chunks of T (the first 8 elements in lo).
template <typename T>
__device__ __forceinline__ void dequantize16(const uint4& codes, float scale, uint4& lo,
                                             uint4& hi) {
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
  uint32_t out[8];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 a = fp8x2_to_float2(words[k] & 0xffffu), b = fp8x2_to_float2(words[k] >> 16);
    out[2 * k] = pack2<T>(a.x * scale, a.y * scale);
    out[2 * k + 1] = pack2<T>(b.x * scale, b.y * scale);
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

// Registers (ptxas, sm_90): HD 128: 226, one CTA (8 warps) per SM; HD 64: capped at 128 for
// two CTAs per SM (12 bytes of spill outside the loop; 235 vs 194 TFLOP/s on a 4096-token
// prompt, H200); HD 32: 118.
// With an fp8 cache (KV = Fp8E4m3) the products run on the activation type T instead.
template <typename T, typename KV, int HD>
__global__ void __launch_bounds__(kThreads, HD <= 64 ? 2 : 1)
    prefill_attention_kernel(const AttnArgs a, const PrefillTile* __restrict__ tiles) {
  constexpr bool kFp8 = kIsFp8<KV>;
  using Op = std::conditional_t<kFp8, T, KV>;  // the MMA operands' type
  constexpr int CPR = HD / 8;                  // 16-byte chunks per row
  constexpr int KSTEPS = HD / 16;              // k-steps of Q K^T
  constexpr int SN = kN / 8;                   // n8 tiles of S
  constexpr int ON = HD / 8;                   // n8 tiles of O
  constexpr int LROWS = kThreads / CPR;        // K/V rows one pass of the CTA loads
  constexpr int LOADS = kN / LROWS;            // K/V rows (of each) per thread per tile
  static_assert(kThreads % CPR == 0 && kN % LROWS == 0 && (kM * CPR) % kThreads == 0);
  // fp8: code chunks (16 codes) per row, rows one pass loads, rows per thread per tile
  constexpr int CC = HD / 16;
  constexpr int CROWS = kThreads / CC;
  constexpr int CLOADS = kN > CROWS ? kN / CROWS : 1;
  static_assert(!kFp8 || (kThreads % CC == 0 && (kN <= CROWS || kN % CROWS == 0)));
  constexpr float kNegInf = -INFINITY;

  extern __shared__ uint4 smem[];
  uint4* sQ = smem;               // [kM][CPR]
  uint4* sK = sQ + kM * CPR;      // [2][kN][CPR]
  uint4* sV = sK + 2 * kN * CPR;  // [2][kN][CPR]
  // fp8: [2][kN][CC] codes of K, then of V, then the scales [2][K, V][kN]
  uint4* cK = sV + 2 * kN * CPR;
  uint4* cV = cK + 2 * kN * CC;
  float* cS = reinterpret_cast<float*>(cV + 2 * kN * CC);

  const PrefillTile tile = tiles[blockIdx.y];
  const int head = blockIdx.x;
  const int kvh = head / (a.n_heads / a.n_kv_heads);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int qs0 = a.q_start[tile.seq];
  // Position of the tile's first row; row r of the tile sees keys [0, pos0 + r].
  const int pos0 = a.ctx_len[tile.seq] - a.q_len[tile.seq] + (tile.row0 - qs0);
  const int kend = tile.kend;             // this partition's end (the tile's: pos0 + nrows)
  const int j0 = tile.kbeg / kN;          // its first key tile
  const int n_kt = (kend + kN - 1) / kN;  // key tiles (those above the diagonal skipped)
  const int n_full = (pos0 + 1) / kN;     // key tiles no row masks
  // Warps whose 16 rows are all past the tile's rows (short chunks) only help load.
  const bool has_rows = warp * 16 < tile.nrows;
  [[maybe_unused]] const int64_t kv_width = (int64_t)a.n_kv_heads * HD;
  const int bs = a.block_size;
  const int32_t* __restrict__ bt = a.block_tables + (int64_t)tile.seq * a.max_blocks;
  [[maybe_unused]] const KV* kc = static_cast<const KV*>(a.k_cache) + kvh * HD;
  [[maybe_unused]] const KV* vc = static_cast<const KV*>(a.v_cache) + kvh * HD;

  // ---- Q tile -> shared (rows past nrows zero) ----
  {
    const T* q = static_cast<const T*>(a.q) + (int64_t)tile.row0 * a.q_stride + head * HD;
#pragma unroll
    for (int i = 0; i < kM * CPR / kThreads; ++i) {
      const int idx = tid + i * kThreads, r = idx / CPR, c = idx % CPR;
      uint4* dst = sQ + swz<HD>(r, c);
      const bool ok = r < tile.nrows;
      if constexpr (std::is_same_v<T, Op>) {
        cp_async16(dst, ok ? q + (int64_t)r * a.q_stride + c * 8 : q, ok);
      } else {  // activations in the other 16-bit type: convert to the MMA operand type
        uint4 v = make_uint4(0, 0, 0, 0);
        if (ok) {
          const uint4 raw = *reinterpret_cast<const uint4*>(q + (int64_t)r * a.q_stride + c * 8);
          const T* e = reinterpret_cast<const T*>(&raw);
          uint32_t* w = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
          for (int k = 0; k < 4; ++k) w[k] = pack2<Op>(to_f32(e[2 * k]), to_f32(e[2 * k + 1]));
        }
        *dst = v;
      }
    }
  }

  // ---- K/V tile loader: this thread's rows lrow + i * LROWS, chunk lchunk (fp8: rows
  // lrow + i * CROWS of the tile, code chunk lchunk) ----
  constexpr int RPT = kFp8 ? CLOADS : LOADS;  // rows (of K and of V) per thread per tile
  const int lrow = kFp8 ? tid / CC : tid / CPR, lchunk = kFp8 ? tid % CC : tid % CPR;
  int blk[RPT];  // block-table entries for the tile the next issue() loads
  auto fetch = [&](int j) {
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      if constexpr (kFp8) {
        const int r = lrow + i * CROWS, t = j * kN + r;
        blk[i] = r < kN && t < kend ? __ldg(bt + t / bs) : 0;
      } else {
        const int t = j * kN + lrow + i * LROWS;
        blk[i] = t < kend ? __ldg(bt + t / bs) : 0;
      }
    }
  };
  auto issue = [&](int j) {
    const int stage = j & 1;
    if constexpr (kFp8) {
      const char* kb = static_cast<const char*>(a.k_cache);
      const char* vb = static_cast<const char*>(a.v_cache);
      const Fp8Layout lay(bs, a.n_kv_heads, HD);
      float* scales = cS + stage * 2 * kN;  // K's kN, then V's
#pragma unroll
      for (int i = 0; i < RPT; ++i) {
        const int r = lrow + i * CROWS, t = j * kN + r;
        if (r >= kN) break;  // head size 32: half the threads cover the tile's rows
        const bool ok = t < kend;
        const int64_t off = lay.codes(blk[i], t % bs, kvh) + lchunk * 16;
        const int so = stage * kN * CC + code_slot<HD>(r, lchunk);
        cp_async16(cK + so, ok ? kb + off : kb, ok);
        cp_async16(cV + so, ok ? vb + off : vb, ok);
        if (lchunk == 0) {
          const int64_t sco = lay.scale(blk[i], t % bs, kvh);
          cp_async4(scales + r, ok ? kb + sco : kb, ok);
          cp_async4(scales + kN + r, ok ? vb + sco : vb, ok);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < LOADS; ++i) {
        const int r = lrow + i * LROWS, t = j * kN + r;
        const bool ok = t < kend;
        const int64_t off = ((int64_t)blk[i] * bs + t % bs) * kv_width + lchunk * 8;
        const int so = stage * kN * CPR + swz<HD>(r, lchunk);
        cp_async16(sK + so, ok ? kc + off : kc, ok);
        cp_async16(sV + so, ok ? vc + off : vc, ok);
      }
    }
  };
  // fp8: the codes of tile j (arrived) as the 16-bit K and V tiles of its stage.
  [[maybe_unused]] auto dequantize_tile = [&](int j) {
    const int stage = j & 1;
    const float* scales = cS + stage * 2 * kN;
    for (int item = tid; item < 2 * kN * CC; item += kThreads) {
      const bool is_v = item >= kN * CC;  // uniform in a warp
      int r, c;
      code_chunk_of<HD>(is_v ? item - kN * CC : item, r, c);
      const uint4 codes = (is_v ? cV : cK)[stage * kN * CC + code_slot<HD>(r, c)];
      uint4 lo, hi;
      dequantize16<T>(codes, scales[(is_v ? kN : 0) + r], lo, hi);
      uint4* tile = (is_v ? sV : sK) + stage * kN * CPR;
      tile[swz<HD>(r, 2 * c)] = lo;
      tile[swz<HD>(r, 2 * c + 1)] = hi;
    }
  };

  fetch(j0);
  issue(j0);
  cp_async_commit();  // group: Q + the first key tile
  if (j0 + 1 < n_kt) fetch(j0 + 1);

  const float sl2 = a.scale * 1.4426950408889634f;  // softmax in base 2
  const int g = lane >> 2, tq = lane & 3;
  const int prow0 = pos0 + warp * 16 + g, prow1 = prow0 + 8;  // positions of my two rows
  // ldmatrix lane pattern for A-like (Q, V^T) and B (K) fragment quads.
  const int a_row = (lane & 7) + (((lane >> 3) & 1) << 3), a_chunk = lane >> 4;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_chunk = (lane >> 3) & 1;

  uint32_t qf[KSTEPS][4];
  float acc[ON][4];
#pragma unroll
  for (int i = 0; i < ON; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  float m0 = kNegInf, m1 = kNegInf, l0 = 0.0f, l1 = 0.0f;  // raw-score max, partial sums

  for (int j = j0; j < n_kt; ++j) {
    if (j + 1 < n_kt) {
      issue(j + 1);
      cp_async_commit();
      if (j + 2 < n_kt) fetch(j + 2);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (kFp8) {  // every warp converts its share, then all of the tile is there
      dequantize_tile(j);
      __syncthreads();
    }
    if (!has_rows) {
      // No rows of its own: this warp only shares the loads, and meets the barrier that
      // ends the iteration (before the next issue() refills this stage).
      __syncthreads();
      continue;
    }
    if (j == j0) {
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk)
        ldsm_x4(qf[kk], sQ + swz<HD>(warp * 16 + a_row, 2 * kk + a_chunk));
    }
    const uint4* Ks = sK + (j & 1) * kN * CPR;
    const uint4* Vs = sV + (j & 1) * kN * CPR;

    // S = Q K^T (raw scores)
    float s[SN][4];
#pragma unroll
    for (int i = 0; i < SN; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
#pragma unroll
      for (int np = 0; np < SN / 2; ++np) {
        uint32_t b[4];
        ldsm_x4(b, Ks + swz<HD>(np * 16 + b_row, 2 * kk + b_chunk));
        mma16816<Op>(s[2 * np], qf[kk], b[0], b[1]);
        mma16816<Op>(s[2 * np + 1], qf[kk], b[2], b[3]);
      }
    }

    // Causal mask on the diagonal tiles: key t is visible to a row at position p iff t <= p.
    if (j >= n_full) {
      const int t0 = j * kN + 2 * tq;
#pragma unroll
      for (int nt = 0; nt < SN; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int t = t0 + nt * 8 + e;
          if (t > prow0) s[nt][e] = kNegInf;
          if (t > prow1) s[nt][2 + e] = kNegInf;
        }
      }
    }

    // Online softmax: rows g (s[.][0..1]) and g + 8 (s[.][2..3]); a quad shares a row.
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int nt = 0; nt < SN; ++nt) {
      mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
      mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
    }
    mx0 = quad_max(mx0);
    mx1 = quad_max(mx1);
    // A row with nothing visible yet keeps max -inf: use 0 as its base (all its p are 0).
    const float base0 = mx0 == kNegInf ? 0.0f : mx0 * sl2;
    const float base1 = mx1 == kNegInf ? 0.0f : mx1 * sl2;
    const float corr0 = fast_exp2(m0 * sl2 - base0), corr1 = fast_exp2(m1 * sl2 - base1);
    m0 = mx0;
    m1 = mx1;
    float rs0 = 0.0f, rs1 = 0.0f;
    uint32_t pf[kN / 16][4];  // P as A fragments, one per 16-key step
#pragma unroll
    for (int nt = 0; nt < SN; ++nt) {
      const float p0 = fast_exp2(fmaf(s[nt][0], sl2, -base0));
      const float p1 = fast_exp2(fmaf(s[nt][1], sl2, -base0));
      const float p2 = fast_exp2(fmaf(s[nt][2], sl2, -base1));
      const float p3 = fast_exp2(fmaf(s[nt][3], sl2, -base1));
      rs0 += p0 + p1;
      rs1 += p2 + p3;
      pf[nt / 2][(nt & 1) * 2 + 0] = pack2<Op>(p0, p1);
      pf[nt / 2][(nt & 1) * 2 + 1] = pack2<Op>(p2, p3);
    }
    l0 = l0 * corr0 + rs0;
    l1 = l1 * corr1 + rs1;
#pragma unroll
    for (int i = 0; i < ON; ++i) {
      acc[i][0] *= corr0;
      acc[i][1] *= corr0;
      acc[i][2] *= corr1;
      acc[i][3] *= corr1;
    }

    // O += P V
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
#pragma unroll
      for (int dp = 0; dp < ON / 2; ++dp) {
        uint32_t b[4];
        ldsm_x4_t(b, Vs + swz<HD>(kk * 16 + a_row, 2 * dp + a_chunk));
        mma16816<Op>(acc[2 * dp], pf[kk], b[0], b[1]);
        mma16816<Op>(acc[2 * dp + 1], pf[kk], b[2], b[3]);
      }
    }
    __syncthreads();  // this stage is refilled by the next iteration's issue()
  }

  // ---- epilogue ----
  if (!has_rows) return;
  l0 = quad_sum(l0);
  l1 = quad_sum(l1);
  if (tile.partial >= 0) {
    // A partition of a split tile: the unnormalized state, in the decode kernels' units
    // (scores scaled by `scale`, natural exponent: exp2((s - m) * sl2) = exp((s - m) * scale)).
    const int rows[2] = {warp * 16 + g, warp * 16 + g + 8};
    const float ms[2] = {m0, m1}, ls[2] = {l0, l1};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (rows[h] >= tile.nrows) continue;
      const int64_t pair = tile.partial + (int64_t)rows[h] * a.n_heads + head;
      float* dst = a.partial_acc + pair * HD;
#pragma unroll
      for (int i = 0; i < ON; ++i)
        *reinterpret_cast<float2*>(dst + i * 8 + 2 * tq) =
            make_float2(acc[i][2 * h], acc[i][2 * h + 1]);
      if (tq == 0) {
        a.partial_ml[pair * 2] = ls[h] > 0.0f ? ms[h] * a.scale : -FLT_MAX;
        a.partial_ml[pair * 2 + 1] = ls[h];
      }
    }
    return;
  }
  // Normalize, stage through this warp's own Q rows, 16-byte stores.
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  // Only this warp ever read its 16 rows of sQ (into qf, at j == j0), so it may overwrite them.
  unsigned char* sO = reinterpret_cast<unsigned char*>(sQ);
#pragma unroll
  for (int i = 0; i < ON; ++i) {
    const int r0 = warp * 16 + g;
    *reinterpret_cast<uint32_t*>(sO + swz<HD>(r0, i) * 16 + tq * 4) =
        pack2<T>(acc[i][0] * inv0, acc[i][1] * inv0);
    *reinterpret_cast<uint32_t*>(sO + swz<HD>(r0 + 8, i) * 16 + tq * 4) =
        pack2<T>(acc[i][2] * inv1, acc[i][3] * inv1);
  }
  __syncwarp();
  T* out = static_cast<T*>(a.out) + (int64_t)tile.row0 * a.out_stride + head * HD;
#pragma unroll
  for (int i = 0; i < 16 * CPR / 32; ++i) {
    const int idx = lane + i * 32, r = warp * 16 + idx / CPR, c = idx % CPR;
    if (r < tile.nrows)
      *reinterpret_cast<uint4*>(out + (int64_t)r * a.out_stride + c * 8) = sQ[swz<HD>(r, c)];
  }
}

template <typename T, typename KV, int HD>
void launch(const AttnArgs& a, const PrefillTile* d_tiles, int n_tiles, cudaStream_t s) {
  constexpr int smem = smem_bytes(HD, kIsFp8<KV>);
  static bool configured = false;  // per instantiation
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<T, KV, HD>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    configured = true;
  }
  dim3 grid((unsigned)a.n_heads, (unsigned)n_tiles);
  prefill_attention_kernel<T, KV, HD><<<grid, kThreads, smem, s>>>(a, d_tiles);
  CUDA_CHECK_LAUNCH();
}

template <typename T, typename KV>
void launch_hd(const AttnArgs& a, const PrefillTile* d_tiles, int n_tiles, cudaStream_t s) {
  switch (a.head_dim) {
    case 32:
      return launch<T, KV, 32>(a, d_tiles, n_tiles, s);
    case 64:
      return launch<T, KV, 64>(a, d_tiles, n_tiles, s);
    case 128:
      return launch<T, KV, 128>(a, d_tiles, n_tiles, s);
    default:
      CHECK_MSG(false, "prefill attention supports head_dim 32, 64 and 128");
  }
}

}  // namespace

int prefill_blocks_per_sm(DType act, DType kv, int head_dim) {
  CHECK(prefill_supports_head_dim(head_dim));
  if (wgmma_prefill_handles(act, kv, head_dim)) return 1;  // 161 KiB of shared memory a block
  const bool bf = act == DType::bf16, kv_bf = kv == DType::bf16;
  const bool fp8 = kv == DType::fp8_e4m3;
  auto per_sm = [&](auto kernel, int hd) {
    int n = 0;
    const int smem = smem_bytes(hd, fp8);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, (size_t)smem));
    return std::max(1, n);
  };
  auto by_hd = [&](auto t, auto k) {
    using T = decltype(t);
    using KV = decltype(k);
    if (head_dim == 32) return per_sm(prefill_attention_kernel<T, KV, 32>, 32);
    if (head_dim == 64) return per_sm(prefill_attention_kernel<T, KV, 64>, 64);
    return per_sm(prefill_attention_kernel<T, KV, 128>, 128);
  };
  if (fp8) return bf ? by_hd(__nv_bfloat16{}, Fp8E4m3{}) : by_hd(__half{}, Fp8E4m3{});
  if (bf && kv_bf) return by_hd(__nv_bfloat16{}, __nv_bfloat16{});
  if (bf) return by_hd(__nv_bfloat16{}, __half{});
  if (kv_bf) return by_hd(__half{}, __nv_bfloat16{});
  return by_hd(__half{}, __half{});
}

void attention_prefill(const AttnArgs& a, const PrefillTile* d_tiles, int n_tiles, cudaStream_t s,
                       PrefillKernel kernel) {
  if (n_tiles == 0) return;
  CHECK(n_tiles <= 65535);
  CHECK(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0);
  CHECK(a.block_size > 0);
  CHECK(a.q_stride % 8 == 0 && a.out_stride % 8 == 0);
  CHECK(reinterpret_cast<uintptr_t>(a.q) % 16 == 0 && reinterpret_cast<uintptr_t>(a.out) % 16 == 0);
  CHECK(reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0);
  const bool bf = a.act_dtype == DType::bf16;
  CHECK(bf || a.act_dtype == DType::f16);
  CHECK(a.kv_dtype == DType::bf16 || a.kv_dtype == DType::f16 || a.kv_dtype == DType::fp8_e4m3);
  const bool wgmma = wgmma_prefill_handles(a.act_dtype, a.kv_dtype, a.head_dim);
  CHECK_MSG(kernel != PrefillKernel::wgmma || wgmma,
            "the wgmma prefill kernel needs an sm_90a build on an sm_90 card, head size 128 and "
            "one 16-bit type for activations and cache");
  if (wgmma && kernel != PrefillKernel::mma_sync)
    return attention_prefill_wgmma(a, d_tiles, n_tiles, s);
  if (a.kv_dtype == DType::fp8_e4m3)
    return bf ? launch_hd<__nv_bfloat16, Fp8E4m3>(a, d_tiles, n_tiles, s)
              : launch_hd<__half, Fp8E4m3>(a, d_tiles, n_tiles, s);
  if (bf && a.kv_dtype == DType::bf16)
    return launch_hd<__nv_bfloat16, __nv_bfloat16>(a, d_tiles, n_tiles, s);
  if (bf) return launch_hd<__nv_bfloat16, __half>(a, d_tiles, n_tiles, s);
  if (a.kv_dtype == DType::bf16) return launch_hd<__half, __nv_bfloat16>(a, d_tiles, n_tiles, s);
  return launch_hd<__half, __half>(a, d_tiles, n_tiles, s);
}

}  // namespace infercept::cuda
