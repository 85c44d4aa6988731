// The few-row product on tensor cores (gemv.h's gemv_mma): decode at batch 3-16 and short
// chunks, where the one-warp-a-feature GEMV (gemv.cu) multiplies every weight piece by every
// input row on the CUDA cores and stops being bound by the weight's bytes, and cuBLASLt's
// tiles stream the weight at 2.6-3.9 TB/s (docs/PERF.md 4.5r).
//
// A team of 8 warps computes tiles of 16 output features (the mma's m) for all n input rows
// (the mma's n, 8 a fragment, up to two fragments); its warps split k, each a contiguous run
// of 32-wide steps, and the team sums their accumulators in shared memory at the end of a
// tile. The weight goes straight from global memory into A fragments: lane (g, t) (g = lane /
// 4, t = lane % 4) loads 16 bytes of feature row g and of row g + 8 at k = 32 s + 8 t, and the
// input row g's 16 bytes at the same k (B fragment). The mma sums over its 16 k in whatever
// order the fragment places them, so as long as A and B hold the same k in the same place, the
// 8 consecutive k a lane loaded can fill the fragment's k slots {2t, 2t+1, 2t+8, 2t+9} of two
// mmas (elements 0-3, then 4-7): one 16-byte load a row instead of four 4-byte ones. The grid
// is what fits at once; teams walk the tiles (input rows staged once a block of two teams), and
// each warp issues its next tile's first weight loads before the team's reduction. Unlike
// gemv.cu it is launched as a plain kernel and lets a programmatic dependent launch only at its
// end (launch(); the other two ways measured slower).
#include <algorithm>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_pieces.cuh"
#include "backend/cuda/mma.cuh"
#include "core/check.h"

namespace infercept::cuda {
namespace {

// A block is kTeams teams of kTeamWarps warps, one block a multiprocessor: the teams share
// one staged copy of the input rows (up to 180 KB: 8 rows of 11,008) and walk their own tiles,
// each with its own barrier. Two blocks of 8 warps held two copies, so the down projection's
// 8 rows of 11,008 and 16 rows of anything went unstaged or left one block of 8 warps, too few
// loads in flight.
constexpr int kTeamWarps = 8;
constexpr int kTeams = 2;
constexpr int kThreads = kTeamWarps * kTeams * 32;
constexpr int kTileRows = 16;  // output features a tile: the mma's m
constexpr int kStepK = 32;     // k a warp covers a step: 4 lanes x 8
// Staged input rows are this many 16-byte pieces wider than a row: lanes g and g + 1 of a
// quarter-warp read rows g and g + 1 at the same k, 64 bytes apart in the banks.
constexpr int kRowPad = 4;
// Input rows are staged in shared memory, up to what a block can hold beside the reduction's
// buffer; wider inputs (8 rows of the 13B's and 8B's down projection) are left to cuBLASLt:
// read from L2 by every tile instead, they made the 13B's products at 8 rows 15% slower than
// at 3 (docs/PERF.md 4.5r).
constexpr size_t kMaxStaged = 180u << 10;  // + up to 33 KB of static buffers

struct MmaArgs {
  const void* x;
  int64_t x_stride;
  int n, k;
  const float* norm;
  float eps;
  UnitSegment seg[kGemvMaxSegments];  // units: tiles of kTileRows features
  int n_segments;
  int total_tiles;
  int steps_per_warp;  // of kStepK; the last warps may have fewer (or none)
};

size_t staged_bytes(const GemvArgs& a) {
  return (size_t)a.n * (size_t)(a.k + 8 * kRowPad) * 2;
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
// NT fragments of 8 input rows (n <= 8 NT). Accumulators: NT x 4 floats a lane (twice when
// gated: gate and up).
template <typename T, typename OutT, int NT, bool kNorm, GemvEpilogue kEpi>
__global__ void __launch_bounds__(kThreads, 1) gemv_mma_kernel(const MmaArgs a) {
  constexpr bool kGated = kEpi == GemvEpilogue::gated;
  constexpr int kMats = kGated ? 2 : 1;
  // Steps a round: 8 loads of 16 bytes in flight a lane (rows g and g + 8, of both weights
  // when gated), as gemv.cu found the stream needs.
  constexpr int kSteps = kGated ? 2 : 4;
  constexpr int kRegs = NT * 4 * kMats;  // accumulators a lane
  extern __shared__ uint4 staged_rows[];
  __shared__ float red[kTeams][kTeamWarps][kRegs][32];

  const int lane = (int)threadIdx.x % 32, team = (int)threadIdx.x / 32 / kTeamWarps;
  const int warp = (int)threadIdx.x / 32 % kTeamWarps;  // within the team
  const int team_thread = (int)threadIdx.x % (kTeamWarps * 32);
  const int g = lane / 4, t = lane % 4;
  auto team_sync = [&] {  // named barriers 1 and 2 (0 is __syncthreads)
    asm volatile("bar.sync %0, %1;" ::"r"(1 + team), "n"(kTeamWarps * 32) : "memory");
  };
  const int k_steps = a.k / kStepK;
  const int step0 = warp * a.steps_per_warp;
  const int step_end = min(k_steps, step0 + a.steps_per_warp);
  const int my_steps = max(0, step_end - step0);
  const int rounds = (my_steps + kSteps - 1) / kSteps;
  const int row_pieces = a.k / 8 + kRowPad;

  // Tile `tile`: its segment, first feature, and this lane's two weight rows (null past m).
  const uint4* wr[kMats][2];
  int tile_seg = 0, tile_row0 = 0;
  auto locate = [&](int tile) {
    tile_seg = segment_of(a.seg, a.n_segments, tile);
    const UnitSegment& sg = a.seg[tile_seg];
    tile_row0 = (tile - sg.first) * kTileRows;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = tile_row0 + g + 8 * h;
      const bool in = row < sg.m;
      wr[0][h] =
          in ? reinterpret_cast<const uint4*>(static_cast<const T*>(sg.w) + (int64_t)row * a.k)
             : nullptr;
      if constexpr (kGated)
        wr[1][h] =
            in ? reinterpret_cast<const uint4*>(static_cast<const T*>(sg.w2) + (int64_t)row * a.k)
               : nullptr;
    }
  };
  uint4 wv[kSteps][kMats][2];
  auto load_round = [&](int r) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int step = step0 + r * kSteps + s;
      const int piece = step * (kStepK / 8) + t;
#pragma unroll
      for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          wv[s][m][h] = step < step_end && wr[m][h] != nullptr ? load_stream(wr[m][h] + piece)
                                                               : make_uint4(0, 0, 0, 0);
    }
  };

  int tile = (int)blockIdx.x * kTeams + team;
  const int tile_step = (int)gridDim.x * kTeams;
  if (tile < a.total_tiles) {
    locate(tile);
    if (rounds > 0) load_round(0);
  }
  pdl_wait();
  const T* x = static_cast<const T*>(a.x);
  if constexpr (kNorm)
    stage_normalized<T, kThreads, 8 * NT>(x, a.x_stride, a.n, a.k, a.norm, a.eps, staged_rows,
                                          row_pieces);
  else
    stage_rows<T, kThreads>(x, a.x_stride, a.n, a.k, staged_rows, row_pieces);
  // Input row g of fragment f, 16 bytes at `piece` (zero past the last row).
  auto load_x = [&](int f, int piece) {
    const int r = f * 8 + g;
    if (r >= a.n) return make_uint4(0, 0, 0, 0);
    return staged_rows[r * row_pieces + piece];
  };

  float acc[kMats][NT][4];
  auto clear = [&] {
#pragma unroll
    for (int m = 0; m < kMats; ++m)
#pragma unroll
      for (int f = 0; f < NT; ++f)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[m][f][c] = 0.0f;
  };
  clear();
  int round = 0;
  while (tile < a.total_tiles) {
    if (round < rounds) {
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const int step = step0 + round * kSteps + s;
        if (step >= step_end) break;
        const int piece = step * (kStepK / 8) + t;
#pragma unroll
        for (int f = 0; f < NT; ++f) {
          const uint4 xv = load_x(f, piece);
#pragma unroll
          for (int m = 0; m < kMats; ++m) {
            const uint4 lo = wv[s][m][0], hi = wv[s][m][1];
            const uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y}, a1[4] = {lo.z, hi.z, lo.w, hi.w};
            mma16816<T>(acc[m][f], a0, xv.x, xv.y);
            mma16816<T>(acc[m][f], a1, xv.z, xv.w);
          }
        }
      }
      if (++round < rounds) {
        load_round(round);
        continue;
      }
    }
    // The tile is done here: accumulators to shared memory, the next tile's first loads out,
    // then the block sums the warps' parts and writes the tile.
#pragma unroll
    for (int m = 0; m < kMats; ++m)
#pragma unroll
      for (int f = 0; f < NT; ++f)
#pragma unroll
        for (int c = 0; c < 4; ++c) red[team][warp][(m * NT + f) * 4 + c][lane] = acc[m][f][c];
    clear();
    const UnitSegment& sg = a.seg[tile_seg];
    const int row0 = tile_row0;
    tile += tile_step;
    round = 0;
    if (tile < a.total_tiles) {
      locate(tile);
      if (rounds > 0) load_round(0);
    }
    team_sync();
    // Team thread i: feature i % 16 of the tile for input row i / 16. In the C fragment,
    // feature f sits in lane (f % 8) * 4 + col / 2, register (f >= 8 ? 2 : 0) + col % 2.
    const int f = team_thread % kTileRows, col = team_thread / kTileRows;
    if (col < a.n && row0 + f < sg.m) {
      const int frag = col / 8, cc = col % 8;
      const int src_lane = (f % 8) * 4 + cc / 2, reg = (f >= 8 ? 2 : 0) + cc % 2;
      float v = 0.0f, v2 = 0.0f;
#pragma unroll
      for (int w = 0; w < kTeamWarps; ++w) {
        v += red[team][w][frag * 4 + reg][src_lane];
        if constexpr (kGated) v2 += red[team][w][(NT + frag) * 4 + reg][src_lane];
      }
      OutT* out = static_cast<OutT*>(sg.out) + (int64_t)col * sg.out_stride + row0 + f;
      write_output<kEpi>(out, v, v2, sg.bias != nullptr ? sg.bias + row0 + f : nullptr);
    }
    team_sync();  // `red` is written again for the next tile
  }
  // The next kernel (a programmatic dependent) may launch once this block's tiles are done,
  // not from its start as gemv.cu's: with an early trigger the RoPE store and the decode
  // attention after the Q/K/V product, and the O projection after the attention, made decode
  // at batch 4 0.8 ms a step slower on the 7B (5.12 -> 6.66 ms without logits).
  pdl_launch_dependents();
}
#else
template <typename T, typename OutT, int NT, bool kNorm, GemvEpilogue kEpi>
__global__ void gemv_mma_kernel(const MmaArgs) {}
#endif

template <typename T, typename OutT, int NT, bool kNorm, GemvEpilogue kEpi>
void launch(const GemvArgs& a, cudaStream_t s) {
  MmaArgs k{};
  k.x = a.x;
  k.x_stride = a.x_stride;
  k.n = a.n;
  k.k = a.k;
  k.norm = a.norm;
  k.eps = a.eps;
  k.n_segments = a.n_segments;
  const int tiles = lay_out_segments(a, kTileRows, k.seg);
  k.total_tiles = tiles;
  k.steps_per_warp = ceil_div(a.k / kStepK, kTeamWarps);
  // Launched as a plain kernel, not a programmatic dependent (its pdl_wait is then a no-op):
  // as one, its blocks, placed early as the decode attention's retired, made that attention
  // cost 2.4 ms a llama2-13b step at batch 3 instead of 1.2 (10.68 against 9.32 ms, PERF 4.5r).
  auto* kernel = gemv_mma_kernel<T, OutT, NT, kNorm, kEpi>;
  const size_t smem = staged_bytes(a);
  const int grid = resident_grid(reinterpret_cast<const void*>(kernel), kThreads, smem, kMaxStaged);
  launch_kernel(kernel, dim3((unsigned)std::min(ceil_div(tiles, kTeams), grid)), dim3(kThreads),
                smem, s, false, k);
}

template <typename T, typename OutT, bool kNorm, GemvEpilogue kEpi>
void launch_rows(const GemvArgs& a, cudaStream_t s) {
  if (a.n <= 8) return launch<T, OutT, 1, kNorm, kEpi>(a, s);
  return launch<T, OutT, 2, kNorm, kEpi>(a, s);
}

template <typename T>
void launch_typed(const GemvArgs& a, cudaStream_t s) {
  const bool norm = a.norm != nullptr;
  switch (a.epilogue) {
    case GemvEpilogue::store:
      if (norm) return launch_rows<T, T, true, GemvEpilogue::store>(a, s);
      if (a.out_dtype == DType::f32) return launch_rows<T, float, false, GemvEpilogue::store>(a, s);
      return launch_rows<T, T, false, GemvEpilogue::store>(a, s);
    case GemvEpilogue::accumulate:
      return launch_rows<T, T, false, GemvEpilogue::accumulate>(a, s);
    case GemvEpilogue::gated:
      return launch_rows<T, T, true, GemvEpilogue::gated>(a, s);
  }
  CHECK_MSG(false, "gemv_mma: unsupported epilogue");
}

}  // namespace

bool gemv_mma_fits(const GemvArgs& a) {
  if (!gemv_args_valid(a) || a.n > kGemvMmaMaxRows || a.k < kStepK || a.k % kStepK != 0)
    return false;
  if (a.signal.ready != nullptr) return false;
  // mma.sync on bf16/f16 (the PTX for older cards has empty kernels).
  return staged_bytes(a) <= kMaxStaged && device_compute_major() >= 8;
}

void gemv_mma(const GemvArgs& a, cudaStream_t s) {
  CHECK(gemv_mma_fits(a));
  if (a.in_dtype == DType::bf16)
    launch_typed<__nv_bfloat16>(a, s);
  else
    launch_typed<__half>(a, s);
}

}  // namespace infercept::cuda
