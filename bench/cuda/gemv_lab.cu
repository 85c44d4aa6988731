// gemv_lab.cu: where a batch-1 product loses against the read rate (docs/PERF.md 4.5k).
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
//   engine N / mma N   (--rows, N > 1 input rows, all the same row) the engine's GEMV and its
//               tensor-core form (gemv_mma.cu, docs/PERF.md 4.5r) at N rows: how far a few-row
//               product is from the read.
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
template <int U, int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    rowwarp_kernel(const __nv_bfloat16* __restrict__ w, const __nv_bfloat16* __restrict__ x,
                   float* __restrict__ out, int m, int k) {
  extern __shared__ uint4 xs[];
  stage_x(x, k, xs);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nv = k / 8;
  for (int row = blockIdx.x * kWarps + warp; row < m; row += gridDim.x * kWarps) {
    const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)row * k);
    const float acc = lab::warp_sum(lab::warp_row_partial<U>(wr, xs, nv, 0, lane));
    if (lane == 0) out[row] = acc;
  }
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
        if (n < 2 || n > infercept::cuda::kGemvMmaMaxRows) {
          std::fprintf(stderr, "--rows: 2..%d\n", infercept::cuda::kGemvMmaMaxRows);
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
    time_it(
        "engine", 0,
        [&](const __nv_bfloat16* p) {
          infercept::cuda::gemv(x, sh.k, infercept::DType::bf16, p, 1, sh.m, sh.k, out, sh.m,
                                infercept::DType::f32, s);
        },
        true);
    const size_t xs_bytes = (size_t)sh.k * 2;
    auto rowwarp = [&](auto kernel, const char* name) {
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
          true);
    };
    rowwarp(rowwarp_kernel<4, 4>, "rowwarp 4");
    rowwarp(rowwarp_kernel<8, 4>, "rowwarp 8");
    rowwarp(rowwarp_kernel<12, 3>, "rowwarp 12");
    rowwarp(rowwarp_kernel<16, 2>, "rowwarp 16");
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
