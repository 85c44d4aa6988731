// gemv_lab.cu: where a batch-1 product loses against the read rate (docs/DESIGN.md, "The CUDA
// backend").
//
// At batch 1 each of a decoder layer's products reads its weight once (32-180 MB on a 7B
// shape), and the engine's GEMV reaches 2.4-3.7 TB/s of the 4.6 a long read-only kernel gets.
// This lab measures, on the same bytes and with L2 defeated (each launch reads the next of
// enough copies to exceed L2 several times):
//   read U      a plain streaming read of the weight's bytes, U 16-byte loads in flight per
//               thread, the grid the resident blocks: what a kernel of that size can read,
//               its start and end included;
//   engine      infercept::cuda::gemv (src/backend/cuda/gemv.cu), the product the engine runs;
//   rowwarp U   one warp per row as in the engine, rounds of U loads a lane (more loads in
//               flight a thread, fewer blocks a multiprocessor);
//   span        the block's 8 warps read one contiguous stretch of the weight together (rows
//               in order), partial sums of a row met in shared memory;
//   cpasync S   one warp per row, the weight streamed through a ring of S stages of shared
//               memory by cp.async: bytes in flight beyond what registers hold;
//   read 8 hH / rowwarp 8 hH   the same with load_stream's L2 hint H (cuda_util.h: 1 256-byte
//               prefetch, 2 evict-first, 3 both); read 8 / rowwarp 8 are the same without one.
//   parts       rowwarp 8 with one piece of its math at a time (see parts_kernel)
//   pipe 2xU    rowwarp with two rounds of U in flight a warp: one consumed while the other
//               streams (the math off the warp's memory path)
//   readrows U  the GEMV's access pattern (warp per row) without its math
//   tiled       the weight stored so the GEMV's warps sweep memory as a read does (see
//               tile_kernel), with and without the math
//   engine N / mma N   (--rows, N input rows, all the same row) the engine's GEMV and its
//               tensor-core form (gemv_mma.cu; docs/DESIGN.md, "The CUDA backend") at N rows:
//               how far a few-row product is from the read.
// Every product is checked against an fp32 reference (relative error, no NaN).
//
// Build: with everything else when CUDA is on (target gemv_lab); run on the device:
//   .carry/bin/gemv_lab [--reps 50] [--copies 0 (auto)] [--shapes 4096x4096,4096x11008,22016x4096]
//                       [--rows 4,8]
// (shapes: rows x k, i.e. m x k of out[m] = W[m, k] x[k]). Exit code 0 when every check passed.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gemv.h"
#include "lab_util.cuh"

namespace {

using namespace lab;  // lab_util.cuh: load_stream, dot8, the read, reference and fill kernels

constexpr int kWarps = 8;

// x (k bf16) into shared memory, once per block.
__device__ void stage_x(const __nv_bfloat16* x, int k, uint4* xs) {
  for (int c = threadIdx.x; c < k / 8; c += blockDim.x)
    xs[c] = reinterpret_cast<const uint4*>(x)[c];
  __syncthreads();
}

// --- rowwarp U: warp per row, rounds of U pieces a lane ---
template <int U, int kMinBlocks, int Hint = 0>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    rowwarp_kernel(const __nv_bfloat16* __restrict__ w, const __nv_bfloat16* __restrict__ x,
                   float* __restrict__ out, int m, int k) {
  extern __shared__ uint4 xs[];
  stage_x(x, k, xs);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nv = k / 8;
  for (int row = blockIdx.x * kWarps + warp; row < m; row += gridDim.x * kWarps) {
    const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)row * k);
    const float acc = lab::warp_sum(lab::warp_row_partial<U, Hint>(wr, xs, nv, 0, lane));
    if (lane == 0) out[row] = acc;
  }
}

// --- parts: rowwarp 8 with one piece of its math at a time, to find what costs the 12% it
// is behind readrows (same rows, same rounds, same occupancy). Mode 0: the weights XORed
// with x from shared memory (the LDS, no arithmetic); 1: dot8 with a constant x in registers
// (the arithmetic, no LDS); 2: x staged as f32 (two LDS a piece, no unpacking of x); 3: two
// accumulators (half the FMA chain). Modes 0 and 1 compute nothing useful. ---
template <int kMode>
__global__ void __launch_bounds__(kWarps * 32, 4)
    parts_kernel(const __nv_bfloat16* __restrict__ w, const __nv_bfloat16* __restrict__ x,
                 float* __restrict__ out, int m, int k) {
  extern __shared__ uint4 xs[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nv = k / 8;
  float4* xf = reinterpret_cast<float4*>(xs);  // mode 2: 2 float4 a piece
  if constexpr (kMode == 2) {
    for (int c = threadIdx.x; c < nv; c += blockDim.x) {
      const uint4 v = reinterpret_cast<const uint4*>(x)[c];
      const uint32_t u[4] = {v.x, v.y, v.z, v.w};
      float f[8];
      for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
      }
      xf[2 * c] = make_float4(f[0], f[1], f[2], f[3]);
      xf[2 * c + 1] = make_float4(f[4], f[5], f[6], f[7]);
    }
    __syncthreads();
  } else {
    stage_x(x, k, xs);
  }
  const uint4 xc = make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u);
  for (int row = blockIdx.x * kWarps + warp; row < m; row += gridDim.x * kWarps) {
    const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)row * k);
    float acc = 0.0f, acc2 = 0.0f;
    uint32_t bits = 0;
    for (int c0 = 0; c0 < nv; c0 += 32 * 8) {
      uint4 v[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int c = c0 + lane + 32 * i;
        v[i] = c < nv ? load_stream(wr + c) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int c = c0 + lane + 32 * i;
        if (c >= nv) continue;
        if constexpr (kMode == 0) {
          const uint4 q = xs[c];
          bits ^= (v[i].x ^ q.x) ^ (v[i].y ^ q.y) ^ (v[i].z ^ q.z) ^ (v[i].w ^ q.w);
        } else if constexpr (kMode == 1) {
          acc += dot8(v[i], xc);
        } else if constexpr (kMode == 2) {
          const float4 p0 = xf[2 * c], p1 = xf[2 * c + 1];
          const float xv[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
          const uint32_t u[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            acc = fmaf(__uint_as_float(u[j] << 16), xv[2 * j], acc);
            acc = fmaf(__uint_as_float(u[j] & 0xffff0000u), xv[2 * j + 1], acc);
          }
        } else {
          const uint4 q = xs[c];
          const uint32_t a[4] = {v[i].x, v[i].y, v[i].z, v[i].w}, b[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            acc = fmaf(__uint_as_float(a[j] << 16), __uint_as_float(b[j] << 16), acc);
            acc2 = fmaf(__uint_as_float(a[j] & 0xffff0000u), __uint_as_float(b[j] & 0xffff0000u),
                        acc2);
          }
        }
      }
    }
    acc = lab::warp_sum(acc + acc2);
    if (lane == 0) out[row] = kMode == 0 ? __uint_as_float(bits) : acc;
  }
}

// --- pipe U: warp per row as rowwarp, the warp's (row, round) sequence flattened and two
// rounds of U pieces in flight: a round is consumed while the next one's loads are out, and
// its buffer is refilled (round t + 2) right after. Against rowwarp, whose warp has nothing in
// flight while it computes a round: does the math's time on the warp's path cost bandwidth? ---
template <int U, int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    pipe_kernel(const __nv_bfloat16* __restrict__ w, const __nv_bfloat16* __restrict__ x,
                float* __restrict__ out, int m, int k) {
  extern __shared__ uint4 xs[];
  stage_x(x, k, xs);
  constexpr int kRound = 32 * U;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nv = k / 8;
  const int rounds = (nv + kRound - 1) / kRound;
  const int first_row = blockIdx.x * kWarps + warp, row_step = gridDim.x * kWarps;
  const int rows_mine = first_row < m ? (m - 1 - first_row) / row_step + 1 : 0;
  const int total = rows_mine * rounds;
  const uint4* wp = reinterpret_cast<const uint4*>(w);
  auto load = [&](int t, uint4(&v)[U]) {
    if (t >= total) return;
    const size_t row = first_row + (size_t)(t / rounds) * row_step;
    const int r = t % rounds;
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int c = r * kRound + lane + 32 * i;
      v[i] = c < nv ? load_stream(wp + row * nv + c) : make_uint4(0, 0, 0, 0);
    }
  };
  float acc = 0.0f;
  auto consume = [&](int t, const uint4(&v)[U]) {
    const int r = t % rounds;
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int c = r * kRound + lane + 32 * i;
      if (c < nv) acc += dot8(v[i], xs[c]);
    }
    if (r == rounds - 1) {
      acc = lab::warp_sum(acc);
      if (lane == 0) out[first_row + (t / rounds) * row_step] = acc;
      acc = 0.0f;
    }
  };
  uint4 a[U], b[U];
  load(0, a);
  load(1, b);
  for (int t = 0; t < total; t += 2) {
    consume(t, a);
    load(t + 2, a);
    if (t + 1 < total) {
      consume(t + 1, b);
      load(t + 3, b);
    }
  }
}

// --- readrows U: the GEMV's access pattern without its math: warp per row (rows of the same
// pass side by side), rounds of U pieces a lane ---
template <int U, int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    readrows_kernel(const uint4* __restrict__ w, int m, int nv, uint32_t* sink) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t acc = 0;
  for (int row = blockIdx.x * kWarps + warp; row < m; row += gridDim.x * kWarps) {
    const uint4* wr = w + (size_t)row * nv;
    for (int c0 = 0; c0 < nv; c0 += 32 * U) {
      uint4 v[U];
#pragma unroll
      for (int i = 0; i < U; ++i) {
        const int c = c0 + lane + 32 * i;
        v[i] = c < nv ? load_stream(wr + c) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < U; ++i) acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
    }
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

// --- tiled: the weight stored so that the GEMV's warps sweep memory as the read kernel does.
// With G warps in the grid (warp w of the grid takes rows w, w + G, ...) and rounds of
// kTileRound pieces, piece c of row `row` lives at
//   ((g * R + r) * G + w) * kTileRound + j,   g = row / G, w = row % G, r = c / kTileRound,
//                                             j = c % kTileRound, R = rounds a row,
// i.e. at any round every warp's chunk is next to its neighbours' (a row's last round is
// padded). The question: is the engine's GEMV behind the read because of what it computes or
// because of where its 4,224 concurrent row streams fall in memory?
constexpr int kTileRound = 32 * 8;

__global__ void tile_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int m, int nv,
                            int g_warps) {
  const int rounds = (nv + kTileRound - 1) / kTileRound;
  const size_t n = (size_t)m * nv;
  for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < n;
       p += (size_t)gridDim.x * blockDim.x) {
    const int row = (int)(p / nv), c = (int)(p % nv);
    const int g = row / g_warps, w = row % g_warps, r = c / kTileRound, j = c % kTileRound;
    dst[(((size_t)g * rounds + r) * g_warps + w) * kTileRound + j] = src[p];
  }
}

size_t tiled_pieces(int m, int nv, int g_warps) {
  const size_t groups = (m + g_warps - 1) / g_warps, rounds = (nv + kTileRound - 1) / kTileRound;
  return groups * rounds * g_warps * kTileRound;
}

// kMath false: the same sweep without the products (a read in the GEMV's order and shape).
template <bool kMath>
__global__ void __launch_bounds__(kWarps * 32, 4)
    tiled_kernel(const uint4* __restrict__ wt, const __nv_bfloat16* __restrict__ x,
                 float* __restrict__ out, int m, int k, uint32_t* sink) {
  extern __shared__ uint4 xs[];
  if constexpr (kMath) stage_x(x, k, xs);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nv = k / 8;
  const int rounds = (nv + kTileRound - 1) / kTileRound;
  const int g_warps = gridDim.x * kWarps, w = blockIdx.x * kWarps + warp;
  uint32_t bits = 0;
  for (int g = 0; g * g_warps + w < m; ++g) {
    float acc = 0.0f;
    for (int r = 0; r < rounds; ++r) {
      const uint4* chunk = wt + (((size_t)g * rounds + r) * g_warps + w) * kTileRound;
      uint4 v[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int c = r * kTileRound + lane + 32 * i;
        v[i] = c < nv ? load_stream(chunk + lane + 32 * i) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int c = r * kTileRound + lane + 32 * i;
        if constexpr (kMath) {
          if (c < nv) acc += dot8(v[i], xs[c]);
        } else {
          bits ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
        }
      }
    }
    if constexpr (kMath) {
      acc = lab::warp_sum(acc);
      if (lane == 0) out[g * g_warps + w] = acc;
    }
  }
  if (!kMath && bits == 0x9e3779b9u) *sink = bits;
}

// --- span: block b reads rows [b m / grid, (b + 1) m / grid) as one contiguous stretch ---
__global__ void __launch_bounds__(kWarps * 32, 4)
    span_kernel(const __nv_bfloat16* __restrict__ w, const __nv_bfloat16* __restrict__ x,
                float* __restrict__ out, int m, int k) {
  constexpr int U = 8;
  extern __shared__ uint4 xs[];
  __shared__ float rows_acc[64];
  stage_x(x, k, xs);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nv = k / 8;
  const int r0 = (int)((int64_t)blockIdx.x * m / gridDim.x);
  const int r1 = (int)((int64_t)(blockIdx.x + 1) * m / gridDim.x);
  for (int r = threadIdx.x; r < r1 - r0; r += blockDim.x) rows_acc[r] = 0.0f;
  __syncthreads();
  const int64_t first = (int64_t)r0 * nv, count = (int64_t)(r1 - r0) * nv;
  const uint4* base = reinterpret_cast<const uint4*>(w) + first;
  constexpr int kBlockRound = kWarps * 32 * U;  // pieces the block reads a round
  for (int64_t q0 = 0; q0 < count; q0 += kBlockRound) {
    uint4 v[U];
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int64_t q = q0 + warp * 32 * U + lane + 32 * i;
      v[i] = q < count ? load_stream(base + q) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int64_t q = q0 + warp * 32 * U + lane + 32 * i;
      const int row = q < count ? (int)(q / nv) : -1;
      float s = q < count ? dot8(v[i], xs[q % nv]) : 0.0f;
      // One shared-memory add a warp when its 32 pieces share a row (the common case).
      const int row0 = __shfl_sync(0xffffffffu, row, 0);
      if (__all_sync(0xffffffffu, row == row0)) {
        for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0 && row0 >= 0) atomicAdd(&rows_acc[row0], s);
      } else if (row >= 0) {
        atomicAdd(&rows_acc[row], s);
      }
    }
  }
  __syncthreads();
  for (int r = threadIdx.x; r < r1 - r0; r += blockDim.x) out[r0 + r] = rows_acc[r];
}

// --- cpasync S: warp per row, the row streamed through S stages of 4 KB a warp ---
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem),
               "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_commit() {
  asm volatile("cp.async.commit_group;");
}
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

template <int S>
__global__ void __launch_bounds__(kWarps * 32)
    cpasync_kernel(const __nv_bfloat16* __restrict__ w, const __nv_bfloat16* __restrict__ x,
                   float* __restrict__ out, int m, int k) {
  constexpr int U = 8;             // pieces a lane per stage
  constexpr int kStage = 32 * U;   // pieces a warp per stage (4 KB)
  extern __shared__ uint4 smem[];  // [x: k / 8][warps][S][kStage]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nv = k / 8;
  uint4* xs = smem;
  uint4* ring = smem + nv + warp * S * kStage;
  // The warp's sequence of rounds over its rows: (row, round) in order. Lane-private slots:
  // a lane reads back only what it copied, so cp.async.wait_group alone orders them.
  const int rounds = (nv + kStage - 1) / kStage;
  const int first_row = blockIdx.x * kWarps + warp, row_step = gridDim.x * kWarps;
  const int rows_mine = first_row < m ? (m - 1 - first_row) / row_step + 1 : 0;
  const int total = rows_mine * rounds;
  auto issue = [&](int t) {  // round t of the sequence into stage t % S (empty group past the end)
    if (t < total) {
      const int row = first_row + (t / rounds) * row_step, r = t % rounds;
      const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)row * k);
      uint4* st = ring + (t % S) * kStage;
#pragma unroll
      for (int i = 0; i < U; ++i) {
        const int c = r * kStage + lane + 32 * i;
        cp_async16(st + lane + 32 * i, wr + (c < nv ? c : 0), c < nv);
      }
    }
    cp_commit();
  };
#pragma unroll
  for (int t = 0; t < S - 1; ++t) issue(t);
  for (int c = threadIdx.x; c < nv; c += blockDim.x) xs[c] = reinterpret_cast<const uint4*>(x)[c];
  __syncthreads();
  float acc = 0.0f;
  for (int t = 0; t < total; ++t) {
    issue(t + S - 1);
    cp_wait<S - 1>();
    const uint4* st = ring + (t % S) * kStage;
    const int r = t % rounds;
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int c = r * kStage + lane + 32 * i;
      if (c < nv) acc += dot8(st[lane + 32 * i], xs[c]);
    }
    if (r == rounds - 1) {
      for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (lane == 0) out[first_row + (t / rounds) * row_step] = acc;
      acc = 0.0f;
    }
  }
  cp_wait<0>();
}

struct Shape {
  int m, k;
};

std::vector<Shape> parse_shapes(const std::string& s) {
  std::vector<Shape> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    const std::string t = s.substr(pos, end - pos);
    const size_t x = t.find('x');
    if (x == std::string::npos) {
      std::fprintf(stderr, "gemv_lab: bad shape '%s' (want MxK)\n", t.c_str());
      std::exit(2);
    }
    out.push_back({std::atoi(t.substr(0, x).c_str()), std::atoi(t.substr(x + 1).c_str())});
    pos = end + 1;
  }
  return out;
}

int resident(const void* kernel, int threads, size_t smem, int sms) {
  int per = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, threads, smem));
  return std::max(1, per) * sms;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 50, copies = 0;
  std::string shapes_arg = "4096x4096,4096x11008,11008x4096,22016x4096";
  std::vector<int> rows_list;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--copies" && i + 1 < argc)
      copies = std::atoi(argv[++i]);
    else if (a == "--shapes" && i + 1 < argc)
      shapes_arg = argv[++i];
    else if (a == "--rows" && i + 1 < argc)
      for (std::string r = argv[++i]; !r.empty();) {
        const size_t c = r.find(',');
        const int n = std::atoi(r.substr(0, c).c_str());
        if (n < 1 || n > infercept::cuda::kGemvMmaMaxRows) {
          std::fprintf(stderr, "--rows: 1..%d\n", infercept::cuda::kGemvMmaMaxRows);
          return 2;
        }
        rows_list.push_back(n);
        r = c == std::string::npos ? "" : r.substr(c + 1);
      }
    else {
      std::fprintf(stderr,
                   "usage: gemv_lab [--reps N] [--copies N] [--shapes MxK,...] [--rows N,...]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("## gemv_lab: %s, %d SMs, L2 %.0f MiB\n\n", prop.name, sms,
              prop.l2CacheSize / 1048576.0);
  std::printf(
      "| shape (m x k) | MB | variant | grid | us a launch | TB/s | rel err vs fp32 | NaN |\n");
  std::printf("|---|---:|---|---:|---:|---:|---:|---:|\n");
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  uint32_t* sink;
  CK(cudaMalloc(&sink, 4));
  bool ok = true;
  for (const Shape sh : parse_shapes(shapes_arg)) {
    const size_t n = (size_t)sh.m * sh.k, bytes = n * 2;
    // Enough copies that a launch never finds its weight in L2 (the launch before read others).
    const int nc =
        copies > 0 ? copies : (int)std::max<size_t>(3, 4 * (size_t)prop.l2CacheSize / bytes + 1);
    std::vector<__nv_bfloat16*> w(nc);
    for (int c = 0; c < nc; ++c) {
      CK(cudaMalloc(&w[c], bytes));
      fill_kernel<<<1024, 256, 0, s>>>(w[c], n, 12345u);  // same values in every copy
    }
    // Up to kGemvMmaMaxRows input rows, all the same (every output row must equal row 0's).
    constexpr int kMaxRows = infercept::cuda::kGemvMmaMaxRows;
    __nv_bfloat16* x;
    float *out, *ref;
    CK(cudaMalloc(&x, (size_t)kMaxRows * sh.k * 2));
    CK(cudaMalloc(&out, (size_t)kMaxRows * sh.m * 4));
    CK(cudaMalloc(&ref, (size_t)sh.m * 4));
    for (int r = 0; r < kMaxRows; ++r)
      fill_kernel<<<64, 256, 0, s>>>(x + (size_t)r * sh.k, sh.k, 777u);
    reference_kernel<<<sh.m, 256, 0, s>>>(w[0], x, ref, sh.k);
    CK(cudaStreamSynchronize(s));
    std::vector<float> h_ref(sh.m), h_out(sh.m);
    CK(cudaMemcpy(h_ref.data(), ref, (size_t)sh.m * 4, cudaMemcpyDeviceToHost));

    auto time_it = [&](const char* name, int grid, auto&& launch, bool check) {
      const double us = time_us(s, reps, [&](int r) { launch(w[r % nc]); });
      char err[32] = "-";
      int nans = 0;
      if (check) {
        CK(cudaMemsetAsync(out, 0xff, (size_t)sh.m * 4, s));  // NaN until written
        launch(w[0]);
        CK(cudaMemcpyAsync(h_out.data(), out, (size_t)sh.m * 4, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        const double e = rel_error(h_out, h_ref, &nans);
        std::snprintf(err, sizeof err, "%.1e", e);
        if (!(e < 1e-2) || nans > 0) ok = false;
      }
      std::printf("| %dx%d | %.1f | %s | %d | %.2f | %.2f | %s | %d |\n", sh.m, sh.k, bytes / 1e6,
                  name, grid, us, bytes / us / 1e6, err, nans);
      std::fflush(stdout);
    };

    const size_t pieces = bytes / 16;
    auto read_case = [&](auto kernel, const char* name) {
      const int g = resident((const void*)kernel, 256, 0, sms);
      time_it(
          name, g,
          [&](const __nv_bfloat16* p) {
            kernel<<<g, 256, 0, s>>>(reinterpret_cast<const uint4*>(p), pieces, sink);
          },
          false);
    };
    read_case(read_kernel<1>, "read 1");
    read_case(read_kernel<4>, "read 4");
    read_case(read_kernel<8>, "read 8");
    // load_stream's L2 hints (cuda_util.h): 256-byte prefetch, evict-first, both.
    read_case(read_kernel<8, 1>, "read 8 h1 (256B)");
    read_case(read_kernel<8, 2>, "read 8 h2 (evict first)");
    read_case(read_kernel<8, 3>, "read 8 h3 (both)");
    read_case(read_kernel<4, 1>, "read 4 h1 (256B)");
    time_it(
        "engine", 0,
        [&](const __nv_bfloat16* p) {
          infercept::cuda::gemv(x, sh.k, infercept::DType::bf16, p, 1, sh.m, sh.k, out, sh.m,
                                infercept::DType::f32, s);
        },
        true);
    const size_t xs_bytes = (size_t)sh.k * 2;
    auto rowwarp = [&](auto kernel, const char* name, bool check = true) {
      if (xs_bytes > 48 * 1024)
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)xs_bytes));
      const int g = std::min(resident((const void*)kernel, kWarps * 32, xs_bytes, sms),
                             (sh.m + kWarps - 1) / kWarps);
      time_it(
          name, g,
          [&](const __nv_bfloat16* p) {
            kernel<<<g, kWarps * 32, xs_bytes, s>>>(p, x, out, sh.m, sh.k);
          },
          check);
    };
    rowwarp(rowwarp_kernel<4, 4>, "rowwarp 4");
    rowwarp(rowwarp_kernel<8, 4>, "rowwarp 8");
    rowwarp(rowwarp_kernel<12, 3>, "rowwarp 12");
    rowwarp(rowwarp_kernel<16, 2>, "rowwarp 16");
    rowwarp(rowwarp_kernel<8, 4, 1>, "rowwarp 8 h1 (256B)");
    rowwarp(rowwarp_kernel<8, 4, 2>, "rowwarp 8 h2 (evict first)");
    rowwarp(rowwarp_kernel<8, 4, 3>, "rowwarp 8 h3 (both)");
    auto readrows = [&](auto kernel, const char* name) {
      const int g = std::min(resident((const void*)kernel, kWarps * 32, 0, sms),
                             (sh.m + kWarps - 1) / kWarps);
      time_it(
          name, g,
          [&](const __nv_bfloat16* p) {
            kernel<<<g, kWarps * 32, 0, s>>>(reinterpret_cast<const uint4*>(p), sh.m, sh.k / 8,
                                             sink);
          },
          false);
    };
    rowwarp(parts_kernel<0>, "parts: x LDS + XOR, no math", false);
    rowwarp(parts_kernel<1>, "parts: math, x constant (no LDS)", false);
    rowwarp(parts_kernel<3>, "parts: two accumulators");
    {  // mode 2 stages x as f32: twice the shared memory
      const size_t xf_bytes = xs_bytes * 2;
      CK(cudaFuncSetAttribute(parts_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              (int)xf_bytes));
      const int g = std::min(resident((const void*)parts_kernel<2>, kWarps * 32, xf_bytes, sms),
                             (sh.m + kWarps - 1) / kWarps);
      time_it(
          "parts: x staged as f32", g,
          [&](const __nv_bfloat16* p) {
            parts_kernel<2><<<g, kWarps * 32, xf_bytes, s>>>(p, x, out, sh.m, sh.k);
          },
          true);
    }
    rowwarp(pipe_kernel<4, 4>, "pipe 2x4 (4 blocks/SM)");
    rowwarp(pipe_kernel<8, 2>, "pipe 2x8 (2 blocks/SM)");
    rowwarp(pipe_kernel<8, 3>, "pipe 2x8 (3 blocks/SM)");
    readrows(readrows_kernel<8, 4>, "readrows 8 (4 blocks/SM)");
    readrows(readrows_kernel<8, 8>, "readrows 8 (8 blocks/SM)");
    readrows(readrows_kernel<16, 2>, "readrows 16 (2 blocks/SM)");
    {
      // The tiled copies (as many as the plain ones), for the grid the tiled GEMV runs.
      if (xs_bytes > 48 * 1024)
        CK(cudaFuncSetAttribute(tiled_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)xs_bytes));
      const int g = std::min(resident((const void*)tiled_kernel<true>, kWarps * 32, xs_bytes, sms),
                             (sh.m + kWarps - 1) / kWarps);
      const size_t tp = tiled_pieces(sh.m, sh.k / 8, g * kWarps);
      std::vector<uint4*> wt(nc);
      for (int c = 0; c < nc; ++c) {
        CK(cudaMalloc(&wt[c], tp * 16));
        CK(cudaMemsetAsync(wt[c], 0, tp * 16, s));
        tile_kernel<<<1024, 256, 0, s>>>(reinterpret_cast<const uint4*>(w[0]), wt[c], sh.m,
                                         sh.k / 8, g * kWarps);
      }
      CK(cudaStreamSynchronize(s));
      int next = 0;  // the launches take the tiled copies in turn, as time_it does the plain ones
      auto pick = [&](const __nv_bfloat16* p) {
        return p == w[0] ? wt[0] : wt[1 + (next++ % (nc - 1))];
      };
      time_it(
          "tiled (GEMV)", g,
          [&](const __nv_bfloat16* p) {
            tiled_kernel<true><<<g, kWarps * 32, xs_bytes, s>>>(pick(p), x, out, sh.m, sh.k, sink);
          },
          true);
      time_it(
          "tiled read (no math)", g,
          [&](const __nv_bfloat16* p) {
            tiled_kernel<false><<<g, kWarps * 32, 0, s>>>(pick(p), x, out, sh.m, sh.k, sink);
          },
          false);
      for (auto* p : wt) CK(cudaFree(p));
    }
    {
      if (xs_bytes > 48 * 1024)
        CK(cudaFuncSetAttribute(span_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)xs_bytes));
      // At most 64 rows a block (its shared sums).
      const int g = std::max(resident((const void*)span_kernel, kWarps * 32, xs_bytes, sms),
                             (sh.m + 63) / 64);
      time_it(
          "span", g,
          [&](const __nv_bfloat16* p) {
            span_kernel<<<g, kWarps * 32, xs_bytes, s>>>(p, x, out, sh.m, sh.k);
          },
          true);
    }
    auto cpasync = [&](auto kernel, int stages, const char* name) {
      const size_t smem = xs_bytes + (size_t)kWarps * stages * 32 * 8 * 16;
      if (smem > prop.sharedMemPerBlockOptin) return;
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
      const int g = std::min(resident((const void*)kernel, kWarps * 32, smem, sms),
                             (sh.m + kWarps - 1) / kWarps);
      time_it(
          name, g,
          [&](const __nv_bfloat16* p) {
            kernel<<<g, kWarps * 32, smem, s>>>(p, x, out, sh.m, sh.k);
          },
          true);
    };
    cpasync(cpasync_kernel<2>, 2, "cpasync 2");
    cpasync(cpasync_kernel<3>, 3, "cpasync 3");
    cpasync(cpasync_kernel<4>, 4, "cpasync 4");
    for (const int nr : rows_list) {
      infercept::cuda::GemvArgs a;
      a.x = x;
      a.x_stride = sh.k;
      a.n = nr;
      a.k = sh.k;
      a.in_dtype = infercept::DType::bf16;
      a.out_dtype = infercept::DType::f32;
      a.seg[0] = infercept::cuda::GemvSegment{nullptr, nullptr, nullptr, out, sh.m, sh.m};
      const std::string e = "engine " + std::to_string(nr), m = "mma " + std::to_string(nr);
      auto with = [&](const __nv_bfloat16* p) {
        infercept::cuda::GemvArgs b = a;
        b.seg[0].w = p;
        return b;
      };
      // Checked on row 0, and the last row against row 0 below.
      if (infercept::cuda::gemv_fits(with(w[0])))
        time_it(
            e.c_str(), 0, [&](const __nv_bfloat16* p) { infercept::cuda::gemv(with(p), s); }, true);
      if (infercept::cuda::gemv_mma_fits(with(w[0]))) {
        time_it(
            m.c_str(), 0, [&](const __nv_bfloat16* p) { infercept::cuda::gemv_mma(with(p), s); },
            true);
        std::vector<float> last(sh.m);
        CK(cudaMemcpy(last.data(), out + (size_t)(nr - 1) * sh.m, (size_t)sh.m * 4,
                      cudaMemcpyDeviceToHost));
        int nans = 0;
        if (!(rel_error(last, h_out, &nans) < 1e-6) || nans > 0) {
          std::printf("| %dx%d | | %s: row %d differs from row 0 | | | | | |\n", sh.m, sh.k,
                      m.c_str(), nr - 1);
          ok = false;
        }
      }
    }
    for (auto* p : w) CK(cudaFree(p));
    CK(cudaFree(x));
    CK(cudaFree(out));
    CK(cudaFree(ref));
  }
  std::printf("\n%s\n",
              ok ? "all products within 1e-2 of the fp32 reference" : "SOME PRODUCTS FAILED");
  return ok ? 0 : 1;
}
