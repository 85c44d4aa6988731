// The pieces of a decode attention shared by decode_kernel (attention.cu) and
// decode_rope_kernel (decode_rope_attention.cu): one warp's 32-key chunks staged by cp.async,
// scored and folded into the warp's softmax state, and the block's state over its warps.
#pragma once

#include <cfloat>
#include <cstdint>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/decode_rope_attention.h"
#include "backend/cuda/kv_fp8.cuh"

namespace infercept::cuda {

// Decode rows (one query row per item, all G query heads of one KV head): memory-bound, so
// everything serves the loads. 4 warps take 32-key chunks in turn. A chunk's 32 K rows and
// 32 V rows go to the warp's shared stage by cp.async, all issued at once and coalesced
// (32 / kPieces rows an instruction), so the warp waits out one memory latency per chunk
// (before: one for K and four for V batches, 22 us a layer at batch 1, context 1,024, with
// the separate combine). Loading K per lane and row (lane j reads key j's row, 32 cache
// lines an instruction) was slower: the load unit serializes the lines, and with the stage
// taking most of the unified L1 the row's sectors were evicted between its 16-byte loads.
// Then lane j scores key j from the stage, and the values are read back by output dimension
// (lane i owns dims [i * HD/32, ...)). Rows are XOR-swizzled by 16-byte piece so that the
// copies, lane-per-row reads and row reads all spread over the banks. The warps' partial
// softmax states meet in shared memory at the end, and for a split row the last partition
// to finish merges every partition's state (combine_decode_row).
// (attend_project runs an item on W = 2 warps of its blocks, to keep four blocks a
// multiprocessor.)
// An fp8 cache (KV = Fp8E4m3) stages its codes the same way, 16 to a piece (half the pieces of
// bf16: the point of fp8 is to read half the bytes), and after the rows the chunk's K and V
// scales, a float per key; lane j scales key j's score by its K scale and its softmax weight
// by its V scale, so the codes are turned to floats in registers and never multiplied one by
// one.
template <typename KV, int HD, int W = 4>
struct DecodeStage {
  static constexpr int kVecElems = 16 / sizeof(KV);  // elements per 16-byte piece
  static constexpr int kPieces = HD / kVecElems;     // pieces per row
  static constexpr int kRowsPerCopy = 32 / kPieces;  // rows one warp-wide cp.async covers
  static constexpr int kWarps = W;
  // fp8: 32 K scales, then 32 V scales.
  static constexpr int kScalePieces = kIsFp8<KV> ? 2 * 32 * (int)sizeof(float) / 16 : 0;
  static constexpr int kWarpPieces = 2 * 32 * kPieces + kScalePieces;  // K rows, V rows, scales
  static constexpr size_t kBytes = 16 * kWarps * kWarpPieces;
  __device__ static int piece(int row, int v) { return row * kPieces + (v ^ (row % kPieces)); }
};

// issue_decode_chunk for an fp8 cache: the rows' codes as bf16's rows are copied (16 codes a
// piece), and each lane's own key's K and V scales (4-byte copies into the stage's scales).
template <int HD>
__device__ __forceinline__ void issue_decode_chunk_fp8(const AttnArgs& a, const int32_t* bt,
                                                       int kvh, int kend, int c0, uint4* my_stage) {
  using Stage = DecodeStage<Fp8E4m3, HD>;
  constexpr int kPieces = Stage::kPieces;
  const int lane = threadIdx.x % 32;
  const char* kc = static_cast<const char*>(a.k_cache);
  const char* vc = static_cast<const char*>(a.v_cache);
  const Fp8Layout lay(a.block_size, a.n_kv_heads, HD);
  const int t = c0 + lane;
  const int tt = t < kend ? t : kend - 1;
  const int64_t block = bt[tt / a.block_size];
  const int row = tt % a.block_size;
  const int64_t codes = lay.codes(block, row, kvh);
  const int sub = lane / kPieces, v = lane % kPieces;
#pragma unroll
  for (int r0 = 0; r0 < 32; r0 += Stage::kRowsPerCopy) {
    const int64_t off = __shfl_sync(0xffffffff, codes, r0 + sub) + 16 * v;
    cp_async16(my_stage + Stage::piece(r0 + sub, v), kc + off, true);
    cp_async16(my_stage + 32 * kPieces + Stage::piece(r0 + sub, v), vc + off, true);
  }
  float* scales = reinterpret_cast<float*>(my_stage + 2 * 32 * kPieces);
  const int64_t so = lay.scale(block, row, kvh);
  cp_async4(scales + lane, kc + so, true);
  cp_async4(scales + 32 + lane, vc + so, true);
  cp_async_commit();
}

// The stage of the chunk of a row's keys from c0 (32 keys, one warp's), K and V rows by
// cp.async, all issued at once. Past kend a lane takes the last key's slot (a valid row) and
// gets p = 0 in decode_warp_chunks, so no load needs a guard.
template <typename KV, int HD>
__device__ __forceinline__ void issue_decode_chunk(const AttnArgs& a, const int32_t* bt, int kvh,
                                                   int kend, int c0, uint4* my_stage) {
  if constexpr (kIsFp8<KV>) {
    issue_decode_chunk_fp8<HD>(a, bt, kvh, kend, c0, my_stage);
  } else {
    using Stage = DecodeStage<KV, HD>;
    constexpr int kPieces = Stage::kPieces;
    const int lane = threadIdx.x % 32;
    const int kv_width = a.n_kv_heads * HD;
    const KV* kc = static_cast<const KV*>(a.k_cache);
    const KV* vc = static_cast<const KV*>(a.v_cache);
    const int t = c0 + lane;
    const int tt = t < kend ? t : kend - 1;
    const int64_t slot = (int64_t)bt[tt / a.block_size] * a.block_size + tt % a.block_size;
    // row r's piece v comes from lane (r % kRowsPerCopy) * kPieces + v
    const int sub = lane / kPieces, v = lane % kPieces;
#pragma unroll
    for (int r0 = 0; r0 < 32; r0 += Stage::kRowsPerCopy) {
      const int64_t off = __shfl_sync(0xffffffff, slot, r0 + sub) * kv_width + kvh * HD;
      cp_async16(my_stage + Stage::piece(r0 + sub, v), reinterpret_cast<const uint4*>(kc + off) + v,
                 true);
      cp_async16(my_stage + 32 * kPieces + Stage::piece(r0 + sub, v),
                 reinterpret_cast<const uint4*>(vc + off) + v, true);
    }
    cp_async_commit();
  }
}

// Returns once KV head kvh's q, k and v rows are written, as the Q/K/V product counts them
// (GemvHeadSignal, r.ready): thread 0 spins, then a block barrier. The last of the head's
// `passers` blocks (or items) to pass sets the counter and its passed count back to zero for
// the next launch.
__device__ __forceinline__ void wait_for_head_rows(const DecodeRopeArgs& r, int kvh, int passers) {
  if (threadIdx.x == 0) {
    while (load_acquire(r.ready + kvh) < r.ready_count) __nanosleep(32);
    if (atomicAdd(r.passed + kvh, 1) == passers - 1) {
      atomicExch(r.ready + kvh, 0);
      atomicExch(r.passed + kvh, 0);
    }
  }
  __syncthreads();
}

// decode_rope_attention's and attend_project's start on a decode row: its query heads
// [head0, head0 + heads) rotated as rope_store_kernel rotates them and rounded to T as it
// stores them, then scaled as decode_kernel reads them, into qs (zeros up to GMAX); and where
// this partition [kbeg, kend) holds the row's new key, that key rotated and stored with its
// value to the row's slot for KV head kvh. With the group split every share's block of that
// partition stores the same bits, since it loads the chunk holding the key next and must not
// depend on another block's store. q, k and v are read from L2 (__ldcg): the Q/K/V product
// may still be running, and L1 is not coherent with its stores. Every thread of the block
// calls it; the caller's barrier then publishes qs and the stored key.
template <typename T, typename KV, int HD, int GMAX>
__device__ __forceinline__ void rotate_q_and_store_new_key(const AttnArgs& a,
                                                           const DecodeRopeArgs& r, int row,
                                                           int kvh, int head0, int heads, int kbeg,
                                                           int kend, int new_key, float (*qs)[HD]) {
  constexpr int kHalf = HD / 2;
  const float pos = (float)r.positions[row];
  const T* q = static_cast<const T*>(a.q) + (int64_t)row * a.q_stride + head0 * HD;
  for (int j = threadIdx.x; j < GMAX * kHalf; j += blockDim.x) {
    const int g = j / kHalf, i = j % kHalf;
    const int i0 = r.neox ? i : 2 * i, i1 = r.neox ? i + kHalf : 2 * i + 1;
    float y0 = 0.0f, y1 = 0.0f;
    if (g < heads)
      rope_rotate(pos, i, HD, r.theta_base, r.freq_factors, to_f32(__ldcg(q + g * HD + i0)),
                  to_f32(__ldcg(q + g * HD + i1)), y0, y1);
    qs[g][i0] = to_f32(from_f32<T>(y0)) * a.scale;
    qs[g][i1] = to_f32(from_f32<T>(y1)) * a.scale;
  }
  if (kbeg <= new_key && new_key < kend) {
    const int kv_width = a.n_kv_heads * HD;
    const T* k = static_cast<const T*>(r.k_new) + (int64_t)row * r.k_stride + kvh * HD;
    const T* v = static_cast<const T*>(r.v_new) + (int64_t)row * r.v_stride + kvh * HD;
    const int64_t at = (int64_t)r.slots[row] * kv_width + kvh * HD;
    KV* kc = static_cast<KV*>(r.k_cache) + at;
    KV* vc = static_cast<KV*>(r.v_cache) + at;
    for (int i = threadIdx.x; i < kHalf; i += blockDim.x) {
      const int i0 = r.neox ? i : 2 * i, i1 = r.neox ? i + kHalf : 2 * i + 1;
      float y0, y1;
      rope_rotate(pos, i, HD, r.theta_base, r.freq_factors, to_f32(__ldcg(k + i0)),
                  to_f32(__ldcg(k + i1)), y0, y1);
      kc[i0] = from_f32<KV>(to_f32(from_f32<T>(y0)));
      kc[i1] = from_f32<KV>(to_f32(from_f32<T>(y1)));
    }
    for (int i = threadIdx.x; i < HD; i += blockDim.x) vc[i] = from_f32<KV>(to_f32(__ldcg(v + i)));
    __threadfence_block();
  }
}

// A softmax state that has seen no key: every head's max -inf, sum and accumulators 0.
template <int GMAX, int KPER>
__device__ __forceinline__ void clear_softmax_state(float (&m)[GMAX], float (&l)[GMAX],
                                                    float (&acc)[GMAX][KPER]) {
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    m[g] = -FLT_MAX;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < KPER; ++i) acc[g][i] = 0.0f;
  }
}

// One warp's chunks of keys [first_c0, kend), every W-th chunk (W warps share the keys),
// scored against the group's query heads in qs (scaled), folded into the warp's softmax state
// (m, l, acc: per head, lane i owning output dims [i * HD/32, ...)). The first chunk's loads
// were issued already when first_issued.
template <typename KV, int HD, int GMAX, int W = 4>
__device__ __forceinline__ void decode_warp_chunks(const AttnArgs& a, const int32_t* bt, int kvh,
                                                   int kend, int first_c0, bool first_issued,
                                                   const float (*qs)[HD], uint4* my_stage,
                                                   float (&m)[GMAX], float (&l)[GMAX],
                                                   float (&acc)[GMAX][HD / 32]) {
  using Stage = DecodeStage<KV, HD, W>;
  constexpr int kWarps = Stage::kWarps, kPer = HD / 32, kVecElems = Stage::kVecElems;
  constexpr int kPieces = Stage::kPieces;
  const int lane = threadIdx.x % 32;
  const uint4* k_stage = my_stage;
  for (int c0 = first_c0; c0 < kend; c0 += kWarps * 32) {
    const bool valid = c0 + lane < kend;
    if (c0 != first_c0 || !first_issued) issue_decode_chunk<KV, HD>(a, bt, kvh, kend, c0, my_stage);
    cp_async_wait<0>();
    __syncwarp();
    float s[GMAX];
#pragma unroll
    for (int g = 0; g < GMAX; ++g) s[g] = 0.0f;
    if constexpr (kIsFp8<KV>) {
      // Code values dotted with q, then scaled once: the key's value is code x scale.
#pragma unroll
      for (int v = 0; v < kPieces; ++v) {
        const uint4 kw = k_stage[Stage::piece(lane, v)];
        const uint32_t words[4] = {kw.x, kw.y, kw.z, kw.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          float kf[4];
          fp8x4_to_f32(words[w], kf);
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int g = 0; g < GMAX; ++g) s[g] += qs[g][v * kVecElems + 4 * w + i] * kf[i];
        }
      }
      const float k_scale = reinterpret_cast<const float*>(my_stage + 2 * 32 * kPieces)[lane];
#pragma unroll
      for (int g = 0; g < GMAX; ++g) s[g] *= k_scale;
    } else {
#pragma unroll
      for (int v = 0; v < kPieces; ++v) {
        const uint4 kw = k_stage[Stage::piece(lane, v)];
        const KV* e = reinterpret_cast<const KV*>(&kw);
#pragma unroll
        for (int i = 0; i < kVecElems; ++i) {
          const float kf = to_f32(e[i]);
#pragma unroll
          for (int g = 0; g < GMAX; ++g) s[g] += qs[g][v * kVecElems + i] * kf;
        }
      }
    }
    float p[GMAX];
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      const float sv = valid ? s[g] : -FLT_MAX;
      float mx = sv;
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
      const float m_new = fmaxf(m[g], mx);
      p[g] = valid ? __expf(sv - m_new) : 0.0f;
      float sum = p[g];
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, o);
      const float corr = __expf(m[g] - m_new);
      l[g] = l[g] * corr + sum;
      m[g] = m_new;
#pragma unroll
      for (int i = 0; i < kPer; ++i) acc[g][i] *= corr;
    }
    const int n_keys = min(32, kend - c0);
    const int my_piece = lane * kPer / kVecElems, my_off = lane * kPer % kVecElems;
    if constexpr (kIsFp8<KV>) {
      // Key j's weight times its V scale (lane j's), then the codes' values: the value is
      // code x scale, and l keeps the unscaled weights.
      const float v_scale = reinterpret_cast<const float*>(my_stage + 2 * 32 * kPieces)[32 + lane];
      float pv[GMAX];
#pragma unroll
      for (int g = 0; g < GMAX; ++g) pv[g] = p[g] * v_scale;
      const uint8_t* vs = reinterpret_cast<const uint8_t*>(my_stage + 32 * kPieces);
      for (int j = 0; j < n_keys; ++j) {
        const uint8_t* e = vs + Stage::piece(j, my_piece) * kVecElems + my_off;
        float vf[kPer];
        if constexpr (kPer == 4) {
          float f[4];
          fp8x4_to_f32(*reinterpret_cast<const uint32_t*>(e), f);
#pragma unroll
          for (int i = 0; i < 4; ++i) vf[i] = f[i];
        } else if constexpr (kPer == 2) {
          const float2 f = fp8x2_to_float2(*reinterpret_cast<const uint16_t*>(e));
          vf[0] = f.x;
          vf[1] = f.y;
        } else {
          static_assert(kPer == 1, "fp8 decode: head_dim 32, 64 or 128");
          vf[0] = fp8x2_to_float2(e[0]).x;
        }
#pragma unroll
        for (int g = 0; g < GMAX; ++g) {
          const float pj = __shfl_sync(0xffffffff, pv[g], j);
#pragma unroll
          for (int i = 0; i < kPer; ++i) acc[g][i] += pj * vf[i];
        }
      }
    } else {
      const KV* vs = reinterpret_cast<const KV*>(my_stage + 32 * kPieces);
      for (int j = 0; j < n_keys; ++j) {
        const KV* e = vs + Stage::piece(j, my_piece) * kVecElems + my_off;
        float vf[kPer];
        if constexpr (kPer == 4) {
          const uint2 w = *reinterpret_cast<const uint2*>(e);
          const KV* x = reinterpret_cast<const KV*>(&w);
#pragma unroll
          for (int i = 0; i < 4; ++i) vf[i] = to_f32(x[i]);
        } else if constexpr (kPer == 2) {
          const uint32_t w = *reinterpret_cast<const uint32_t*>(e);
          const KV* x = reinterpret_cast<const KV*>(&w);
          vf[0] = to_f32(x[0]);
          vf[1] = to_f32(x[1]);
        } else {
#pragma unroll
          for (int i = 0; i < kPer; ++i) vf[i] = to_f32(e[i]);
        }
#pragma unroll
        for (int g = 0; g < GMAX; ++g) {
          const float pj = __shfl_sync(0xffffffff, p[g], j);
#pragma unroll
          for (int i = 0; i < kPer; ++i) acc[g][i] += pj * vf[i];
        }
      }
    }
    __syncwarp();  // every lane is done with the stage before the next chunk refills it
  }
}

// The block's softmax state over its warps' states: for each (query head g < group, dim d)
// of the block, emit(g, d, num, den, mx) with num = sum_w e^(m_w - mx) acc_w[d] and den the
// same sum of l_w (0 when no warp saw a key). The warps' stages become the merge buffer;
// wml (shared, 2 x kWarps x GMAX floats) takes the warps' maxima and sums.
// Every thread of the block calls it; warps from kWarps on bring no state, only their hands.
template <int HD, int GMAX, int kWarps, typename Emit>
__device__ __forceinline__ void decode_block_state(uint4* stage_raw, float* wml, int group,
                                                   const float (&m)[GMAX], const float (&l)[GMAX],
                                                   const float (&acc)[GMAX][HD / 32], Emit&& emit) {
  constexpr int kPer = HD / 32;
  auto wm = reinterpret_cast<float(*)[GMAX]>(wml);
  auto wl = reinterpret_cast<float(*)[GMAX]>(wml + kWarps * GMAX);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // every warp is done with its stages: they become the merge buffer
  float* wacc = reinterpret_cast<float*>(stage_raw);  // [kWarps][GMAX][HD]
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    if (warp >= kWarps) break;
    if (lane == 0) {
      wm[warp][g] = m[g];
      wl[warp][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) wacc[(warp * GMAX + g) * HD + lane * kPer + i] = acc[g][i];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < group * HD; idx += blockDim.x) {
    const int g = idx / HD, d = idx % HD;
    float mx = -FLT_MAX;
    for (int w = 0; w < kWarps; ++w)
      if (wl[w][g] > 0.0f) mx = fmaxf(mx, wm[w][g]);
    float num = 0.0f, den = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      if (wl[w][g] == 0.0f) continue;
      const float f = __expf(wm[w][g] - mx);
      num += f * wacc[(w * GMAX + g) * HD + d];
      den += f * wl[w][g];
    }
    emit(g, d, num, den, mx);
  }
}

}  // namespace infercept::cuda
