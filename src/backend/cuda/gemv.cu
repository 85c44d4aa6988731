#include "backend/cuda/gemv.h"

#include <algorithm>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gemv_pieces.cuh"
#include "backend/cuda/launch_mode.h"
#include "core/check.h"

namespace infercept::cuda {
namespace {

constexpr int kWarps = 8;  // per block; one output feature per warp
// The fused forms (norm prologue, accumulate, gated) serve decode at batch 1-2: fewer row
// counts keep the number of kernel instances (and the build time) down.
constexpr int kFusedMaxRows = 4;
// Normalized input rows live in shared memory: at most this much a block.
constexpr size_t kMaxStagedBytes = 96u << 10;

// Unnormalized input rows staged in shared memory (KernelArgs::stage_x) up to this size.
constexpr size_t kMaxStagedX = 48u << 10;

struct KernelArgs {
  const void* x;
  int64_t x_stride;
  int k;
  const float* norm;
  float eps;
  UnitSegment seg[kGemvMaxSegments];  // units: virtual blocks of kWarps rows
  int n_segments;
  int total_blocks;  // virtual blocks of kWarps features over all segments
  // 1 where they fit kMaxStagedX: the input rows of an unnormalized product are copied to
  // shared memory once per block (as the normalized ones are) instead of every warp reading
  // them from L1/L2 beside its weights; the O and down projections at batch 1 took 3% of the
  // step less.
  int stage_x;
  // GemvHeadSignal: null, or the KV heads' counters; the virtual blocks then go head by head,
  // head_vbs_q of Q rows, then head_vbs_kv of K and of V rows each.
  int* ready;
  int head_vbs_q, head_vbs_kv;
};

// One warp per output feature (per pair of features when gated): its lanes stream the weight
// row in 16-byte pieces, several in flight per lane, and keep one f32 sum per input row; a
// butterfly reduces them.
//
// The warp walks its rows (virtual blocks b, b + gridDim.x, ...) as one flat sequence of
// rounds of kUnroll loads per lane, each issued whole and consumed whole. The next row's first
// round goes out before the finished row's butterfly and store, and the block's very first
// round before pdl_wait() (4.52 -> 4.20 ms a batch-1 step on the H200): weights do not depend
// on the previous kernel, so a block that becomes resident while that kernel drains has its
// first weights in registers by the time its input is ready. The rounds of a row are counted for
// the whole warp (ceil(k / 8 / (32 kUnroll))), so every lane reaches the butterfly together.
// (Rounds of half the size pipelined two deep, the next issued as soon as one is consumed,
// measured the same at batch 1 and 1% slower at batch 2: docs/PERF.md 4.5k.)
//
// At 1-2 rows (decode at batch 1-2) four blocks must fit a multiprocessor: 64 registers a
// thread (the norm + Q/K/V form took 70 unbounded, i.e. three blocks, and ran slower).
template <typename T, typename OutT, int NR, bool kNorm, GemvEpilogue kEpi>
__global__ void __launch_bounds__(kWarps * 32, NR <= 2 ? 4 : 1) gemv_kernel(const KernelArgs a) {
  // Two rows a warp: the gate and up rows.
  constexpr bool kGated = kEpi == GemvEpilogue::gated;
  // 16-byte weight loads in flight per lane: 8 (two rows' worth of 4 when gated). With 4, a
  // 4096-wide row took 4 round trips to memory and the O projection ran at ~2.7 TB/s.
  constexpr int kUnroll = kGated ? 4 : 8;
  constexpr int kRoundPieces = 32 * kUnroll;  // 16-byte pieces a warp reads per round
  extern __shared__ uint4 staged_raw[];
  T* xs_sh = reinterpret_cast<T*>(staged_raw);

  // The next kernel may be scheduled as our blocks retire; it waits for our results itself.
  pdl_launch_dependents();
  const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
  const int nv = a.k / 8;
  const int rounds = (nv + kRoundPieces - 1) / kRoundPieces;
  // The grid is at most what fits on the device at once: block b computes virtual blocks
  // b, b + gridDim.x, ... (kWarps output features each), so the input rows are staged and
  // normalized once per resident block rather than once per 8 features (1,536 times for a
  // 7B layer's Q, K and V: as many bytes from L2 as half the weights).
  // The segment of virtual block vb and this warp's row in it (loc_row; loc_head, its KV head
  // when signalling); -1 past a segment's last row.
  const uint4 *wr = nullptr, *ur = nullptr;
  int loc_row = 0, loc_head = 0;
  auto locate = [&](int vb) {
    int s = 0, row;
    if (kEpi == GemvEpilogue::store && kNorm && a.ready != nullptr) {
      const int per_head = a.head_vbs_q + 2 * a.head_vbs_kv, w = vb % per_head;
      loc_head = vb / per_head;
      if (w < a.head_vbs_q) {
        row = (loc_head * a.head_vbs_q + w) * kWarps + warp;
      } else {
        s = 1 + (w - a.head_vbs_q) / a.head_vbs_kv;
        row = (loc_head * a.head_vbs_kv + (w - a.head_vbs_q) % a.head_vbs_kv) * kWarps + warp;
      }
    } else {
      s = segment_of(a.seg, a.n_segments, vb);
      row = (vb - a.seg[s].first) * kWarps + warp;
    }
    const UnitSegment& g = a.seg[s];
    loc_row = row;
    wr = reinterpret_cast<const uint4*>(static_cast<const T*>(g.w) + (int64_t)row * a.k);
    ur = kGated ? reinterpret_cast<const uint4*>(static_cast<const T*>(g.w2) + (int64_t)row * a.k)
                : nullptr;
    return row < g.m ? s : -1;
  };
  // The first virtual block at or after vb (stepping by the grid) that has a row for this warp.
  int seg = -1;
  auto next_row = [&](int vb) {
    for (; vb < a.total_blocks; vb += (int)gridDim.x)
      if ((seg = locate(vb)) >= 0) return vb;
    return vb;
  };
  uint4 wv[kUnroll], uv[kUnroll];
  auto load_round = [&](int r) {
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) {
      const int c = r * kRoundPieces + lane + 32 * i;
      wv[i] = c < nv ? load_stream(wr + c) : make_uint4(0, 0, 0, 0);
      if constexpr (kGated) uv[i] = c < nv ? load_stream(ur + c) : make_uint4(0, 0, 0, 0);
    }
  };

  int vb = next_row((int)blockIdx.x);
  if (vb < a.total_blocks) load_round(0);
  pdl_wait();
  // Input rows in shared memory (KernelArgs::stage_x; always when normalized).
  const T* x = static_cast<const T*>(a.x);
  if constexpr (kNorm)
    stage_normalized<T, kWarps * 32, NR>(x, a.x_stride, NR, a.k, a.norm, a.eps, staged_raw, nv);
  else if (a.stage_x)
    stage_rows<T, kWarps * 32>(x, a.x_stride, NR, a.k, staged_raw, nv);

  const bool x_staged = kNorm || a.stage_x;
  auto load_x = [&](int r, int c) {
    if (x_staged) return reinterpret_cast<const uint4*>(xs_sh)[r * nv + c];
    return __ldg(reinterpret_cast<const uint4*>(x + r * a.x_stride) + c);
  };
  float acc[NR], acc2[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) acc[r] = acc2[r] = 0.0f;
  int round = 0;
  while (vb < a.total_blocks) {
    // Consume this round (every load of it was issued before the first use, the row's last
    // partial round too: a tail taken one load at a time cost a memory latency per piece).
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) {
      const int c = round * kRoundPieces + lane + 32 * i;
      if (c >= nv) continue;
      float wf[8], uf[8];
      unpack8<T>(wv[i], wf);
      if constexpr (kGated) unpack8<T>(uv[i], uf);
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        float xf[8];
        unpack8<T>(load_x(r, c), xf);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          acc[r] = fmaf(wf[j], xf[j], acc[r]);
          if constexpr (kGated) acc2[r] = fmaf(uf[j], xf[j], acc2[r]);
        }
      }
    }
    if (++round < rounds) {
      load_round(round);
      continue;
    }
    // The row is done: reduce, write, and start the next row's first round before the
    // epilogue so its loads are in flight meanwhile.
#pragma unroll
    for (int r = 0; r < NR; ++r) {
#pragma unroll
      for (int off = 16; off > 0; off /= 2) {
        acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
        if constexpr (kGated) acc2[r] += __shfl_xor_sync(0xffffffffu, acc2[r], off);
      }
    }
    const UnitSegment& g = a.seg[seg];
    const int row = loc_row, head = loc_head;
    float v = acc[0], v2 = acc2[0];
#pragma unroll
    for (int r = 1; r < NR; ++r)
      if (lane == r) v = acc[r], v2 = acc2[r];
#pragma unroll
    for (int r = 0; r < NR; ++r) acc[r] = acc2[r] = 0.0f;
    OutT* out_row = static_cast<OutT*>(g.out) + (int64_t)lane * g.out_stride;
    OutT* out = out_row + row;
    const float* bias = g.bias;
    vb = next_row(vb + (int)gridDim.x);
    round = 0;
    if (vb < a.total_blocks) load_round(0);
    if (lane < NR) write_output<kEpi>(out, v, v2, bias != nullptr ? bias + row : nullptr);
    if constexpr (kEpi == GemvEpilogue::store && kNorm) {
      // The block's kWarps rows of this virtual block count for their KV head (the same for
      // every warp: in head order every warp has a row in every virtual block) once all are
      // out: one release a block rather than one a warp (each waits for its warp's loads).
      if (a.ready != nullptr) {
        __syncthreads();
        if (threadIdx.x == 0) red_release_add(a.ready + head, kWarps);
      }
    }
  }
}

bool stages_x(const GemvArgs& a) {
  return a.norm == nullptr && (size_t)a.n * (size_t)a.k * 2 <= kMaxStagedX;
}

size_t staged_bytes(const GemvArgs& a) {
  return a.norm != nullptr || stages_x(a) ? (size_t)a.n * (size_t)a.k * 2 : 0;
}

template <typename T, typename OutT, int NR, bool kNorm, GemvEpilogue kEpi>
void launch(const GemvArgs& a, cudaStream_t s) {
  KernelArgs k{};
  k.x = a.x;
  k.x_stride = a.x_stride;
  k.k = a.k;
  k.norm = a.norm;
  k.eps = a.eps;
  k.n_segments = a.n_segments;
  const int blocks = lay_out_segments(a, kWarps, k.seg);
  k.ready = a.signal.ready;
  if (k.ready != nullptr) {
    k.head_vbs_q = a.signal.q_rows / kWarps;
    k.head_vbs_kv = a.signal.kv_rows / kWarps;
  }
  k.total_blocks = blocks;
  k.stage_x = stages_x(a) ? 1 : 0;
  auto* kernel = gemv_kernel<T, OutT, NR, kNorm, kEpi>;
  const size_t smem = staged_bytes(a);
  const int grid =
      resident_grid(reinterpret_cast<const void*>(kernel), kWarps * 32, smem, kMaxStagedBytes);
  launch_kernel(kernel, dim3((unsigned)std::min(blocks, grid)), dim3(kWarps * 32), smem, s,
                programmatic_launch(), k);
}

template <typename T, typename OutT, bool kNorm, GemvEpilogue kEpi, int kMax>
void launch_rows(const GemvArgs& a, cudaStream_t s) {
  switch (a.n) {
#define INFERCEPT_GEMV_CASE(N)                                             \
  case N:                                                                  \
    if constexpr (N <= kMax) return launch<T, OutT, N, kNorm, kEpi>(a, s); \
    break;
    INFERCEPT_GEMV_CASE(1)
    INFERCEPT_GEMV_CASE(2)
    INFERCEPT_GEMV_CASE(3)
    INFERCEPT_GEMV_CASE(4)
    INFERCEPT_GEMV_CASE(5)
    INFERCEPT_GEMV_CASE(6)
    INFERCEPT_GEMV_CASE(7)
    INFERCEPT_GEMV_CASE(8)
#undef INFERCEPT_GEMV_CASE
    default:
      break;
  }
  CHECK_MSG(false, "gemv: unsupported row count");
}

template <typename T>
void launch_typed(const GemvArgs& a, cudaStream_t s) {
  const bool norm = a.norm != nullptr;
  switch (a.epilogue) {
    case GemvEpilogue::store:
      if (norm) return launch_rows<T, T, true, GemvEpilogue::store, kFusedMaxRows>(a, s);
      if (a.out_dtype == DType::f32)
        return launch_rows<T, float, false, GemvEpilogue::store, kGemvMaxRows>(a, s);
      return launch_rows<T, T, false, GemvEpilogue::store, kGemvMaxRows>(a, s);
    case GemvEpilogue::accumulate:
      return launch_rows<T, T, false, GemvEpilogue::accumulate, kFusedMaxRows>(a, s);
    case GemvEpilogue::gated:
      return launch_rows<T, T, true, GemvEpilogue::gated, kFusedMaxRows>(a, s);
  }
}

}  // namespace

bool gemv_args_valid(const GemvArgs& a) {
  const bool half = a.in_dtype == DType::bf16 || a.in_dtype == DType::f16;
  const bool plain = a.norm == nullptr && a.epilogue == GemvEpilogue::store;
  if (!half || a.n < 1) return false;
  if (a.out_dtype != a.in_dtype && !(plain && a.out_dtype == DType::f32)) return false;
  // The gated form always normalizes (it is the FFN's first half); accumulate never does.
  if (a.epilogue == GemvEpilogue::gated && a.norm == nullptr) return false;
  if (a.epilogue == GemvEpilogue::accumulate && a.norm != nullptr) return false;
  if (a.n_segments < 1 || a.n_segments > kGemvMaxSegments) return false;
  if (a.k % 8 != 0 || a.x_stride % 8 != 0 || !aligned16(a.x) || a.k / 8 >= (1 << 30)) return false;
  if (a.norm != nullptr && !aligned16(a.norm)) return false;
  for (int i = 0; i < a.n_segments; ++i) {
    const GemvSegment& g = a.seg[i];
    if (g.w == nullptr || !aligned16(g.w) || g.out == nullptr || g.m < 1) return false;
    if ((a.epilogue == GemvEpilogue::gated) != (g.w2 != nullptr)) return false;
    if (g.w2 != nullptr && !aligned16(g.w2)) return false;
    if (g.bias != nullptr && a.epilogue != GemvEpilogue::store) return false;
  }
  return true;
}

bool gemv_fits(const GemvArgs& a) {
  if (!gemv_args_valid(a)) return false;
  const bool plain = a.norm == nullptr && a.epilogue == GemvEpilogue::store;
  if (a.n > (plain ? kGemvMaxRows : kFusedMaxRows)) return false;
  if (a.signal.ready != nullptr) {
    const GemvHeadSignal& h = a.signal;
    if (a.epilogue != GemvEpilogue::store || a.norm == nullptr || a.n_segments != 3 ||
        a.n > kFusedMaxRows || h.q_rows < kWarps || h.kv_rows < kWarps || h.q_rows % kWarps != 0 ||
        h.kv_rows % kWarps != 0 || a.seg[0].m % h.q_rows != 0 ||
        a.seg[1].m != a.seg[0].m / h.q_rows * h.kv_rows || a.seg[2].m != a.seg[1].m)
      return false;
    for (int i = 0; i < 3; ++i)
      if (a.seg[i].bias != nullptr) return false;
  }
  return a.norm == nullptr || staged_bytes(a) <= kMaxStagedBytes;
}

void gemv(const GemvArgs& a, cudaStream_t s) {
  CHECK(gemv_fits(a));
  if (a.in_dtype == DType::bf16)
    launch_typed<__nv_bfloat16>(a, s);
  else
    launch_typed<__half>(a, s);
}

namespace {
// The arguments of the plain product of one weight (store epilogue, no norm, no bias).
GemvArgs plain_args(const void* x, int64_t x_stride, DType in_dtype, const void* w, int64_t n,
                    int64_t m, int64_t k, void* out, int64_t out_stride, DType out_dtype) {
  GemvArgs a;
  a.x = x;
  a.x_stride = x_stride;
  a.n = (int)n;
  a.k = (int)k;
  a.in_dtype = in_dtype;
  a.out_dtype = out_dtype;
  a.seg[0] = GemvSegment{w, nullptr, nullptr, out, out_stride, (int)m};
  return a;
}
}  // namespace

bool gemv_fits(int64_t n, int64_t k, const void* x, int64_t x_stride, const void* w, DType in_dtype,
               DType out_dtype) {
  if (n < 1 || n > kGemvMaxRows || k < 1 || k >= ((int64_t)1 << 31)) return false;
  char any_output;  // only the output's type matters to the answer
  return gemv_fits(plain_args(x, x_stride, in_dtype, w, n, 1, k, &any_output, 0, out_dtype));
}

void gemv(const void* x, int64_t x_stride, DType in_dtype, const void* w, int64_t n, int64_t m,
          int64_t k, void* out, int64_t out_stride, DType out_dtype, cudaStream_t s) {
  gemv(plain_args(x, x_stride, in_dtype, w, n, m, k, out, out_stride, out_dtype), s);
}

}  // namespace infercept::cuda
