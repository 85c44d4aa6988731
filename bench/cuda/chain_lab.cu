// chain_lab.cu: would one persistent kernel per decoder layer close the batch-1 gap?
// (docs/PERF.md 4.5l-4.5m: a plain read of one product's weight in one kernel reaches only
// 3.3-4.3 TB/s, each kernel's start and drain costing ~2-3 us, and a 7B layer runs ~7 kernels.)
// Answered: no; programmatic launches recover as much. The bulk-copy GEMV that came out of
// it was slower than the engine's GEMV in a step and left src/ (git history has
// src/backend/cuda/gemv_bulk.cu); its form here ("bulk x4") is the reference.
//
// The four weight products of one decoder layer at batch 1 (Q/K/V, O, gate+up, down), each
// product's input standing for what the one before it produced, so product p + 1 may start
// only when product p is done everywhere:
//   read all    one streaming read of the layer's weight bytes (one allocation): the floor
//               of what any schedule of these products can reach;
//   read x4     the same bytes as four read kernels, one a product;
//   engine x4   infercept::cuda::gemv four times (the engine's product and its preload),
//               without and with programmatic launches;
//   rowwarp x4  four launches of the persistent loop below, one product each;
//   chain       one persistent kernel (grid = the resident blocks) running the four
//               products with a grid-wide barrier between them;
//   chain+pre   the same, each warp loading its first round of the next product's weight
//               (which depends on nothing) before it waits at the barrier, so the weight
//               stream does not stop while the grid synchronizes (more registers: fewer
//               blocks a multiprocessor, so the chain also runs at its grid for comparison).
//   engine x4 PDL  the same with the engine's programmatic launches on (as in its steps)
//   bulk x4     four launches of a GEMV that streams its weight through shared memory: one
//               block a multiprocessor, a producer thread issuing bulk copies (cp.async.bulk,
//               the copy engine of the multiprocessor) of whole-row tiles into a ring of
//               stages, eight warps computing from the ring (ring 136 KB, tiles <= 64 KB: the
//               best of rings of 96-200 KB and tiles of 16-64 KB), without and with
//               programmatic launches. With them, a block of product p + 1 fills its ring with
//               p + 1's weight while product p drains (the weight depends on nothing), and
//               waits only before it reads its input.
//   bulk chain  the bulk GEMV as one persistent kernel over the four products: the producer
//               streams every tile of all four in order while the consumers meet at a grid
//               barrier between products, so the ring keeps filling with the next product's
//               weight while the grid synchronizes.
// Every product's output is checked against an fp32 reference (relative error, no NaN).
//
// Build: with everything else when CUDA is on (target chain_lab); run on the device:
//   .carry/bin/chain_lab [--model 7b|13b] [--reps 20]        exit code 0 when every check passed

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda/ptx>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/launch_mode.h"
#include "lab_util.cuh"

namespace {

using namespace lab;  // lab_util.cuh: load_stream, dot8, the read, reference and fill kernels

constexpr int kWarps = 8;
constexpr int kU = 8;  // 16-byte loads a lane a round (gemv_lab's rowwarp 8)
constexpr int kMaxProducts = 4;

struct Product {
  const __nv_bfloat16* w;  // [m, k]
  const __nv_bfloat16* x;  // [k]
  float* out;              // [m]
  int m, k;
};
struct Chain {
  Product p[kMaxProducts];
  int n;
};

// Every block arrives once per barrier; the last one to arrive resets the count and moves the
// generation on, which the others wait for. The grid is at most the resident blocks, so all
// of them run at once and the spin ends.
template <class Sync>
__device__ void grid_barrier_with(Sync sync, unsigned* count, volatile unsigned* generation) {
  sync();
  if (threadIdx.x == 0) {
    const unsigned g = *generation;
    __threadfence();
    if (atomicAdd(count, 1u) == gridDim.x - 1) {
      *count = 0;
      __threadfence();
      atomicAdd(const_cast<unsigned*>(generation), 1u);
    } else {
      while (*generation == g) {
      }
    }
    __threadfence();
  }
  sync();
}
__device__ void grid_barrier(unsigned* count, volatile unsigned* generation) {
  grid_barrier_with([] { __syncthreads(); }, count, generation);
}

// Products [first, first + n) of the chain, one warp a row, rounds of kU loads a lane; a grid
// barrier between products. kPreload: before the barrier, each warp loads its first round of
// its first row of the next product into registers and starts that row with them.
template <bool kPreload>
__global__ void __launch_bounds__(kWarps * 32, 2)
    chain_kernel(const Chain c, int first, int n, unsigned* bar_count, unsigned* bar_gen) {
  extern __shared__ uint4 xs[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row0 = blockIdx.x * kWarps + warp, row_step = gridDim.x * kWarps;
  uint4 pre[kU];
  bool have_pre = false;
  for (int p = first; p < first + n; ++p) {
    const Product P = c.p[p];
    const int nv = P.k / 8;
    for (int i = threadIdx.x; i < nv; i += blockDim.x)
      xs[i] = reinterpret_cast<const uint4*>(P.x)[i];
    __syncthreads();
    for (int row = row0; row < P.m; row += row_step) {
      const uint4* wr = reinterpret_cast<const uint4*>(P.w + (size_t)row * P.k);
      float acc = 0.0f;
      int c0 = 0;
      if (kPreload && have_pre) {  // the round loaded before the barrier
#pragma unroll
        for (int i = 0; i < kU; ++i) {
          const int cc = lane + 32 * i;
          if (cc < nv) acc += dot8(pre[i], xs[cc]);
        }
        c0 = 32 * kU;
        have_pre = false;
      }
      acc = lab::warp_sum(acc + lab::warp_row_partial<kU>(wr, xs, nv, c0, lane));
      if (lane == 0) P.out[row] = acc;
    }
    if (p + 1 < first + n) {
      if (kPreload) {
        const Product N = c.p[p + 1];
        if (row0 < N.m) {
          const uint4* wr = reinterpret_cast<const uint4*>(N.w + (size_t)row0 * N.k);
          const int nvn = N.k / 8;
#pragma unroll
          for (int i = 0; i < kU; ++i) {
            const int cc = lane + 32 * i;
            pre[i] = cc < nvn ? load_stream(wr + cc) : make_uint4(0, 0, 0, 0);
          }
          have_pre = true;
        }
      }
      grid_barrier(bar_count, bar_gen);
    }
  }
}

// --- bulk: the weight streamed through a ring in shared memory by bulk copies ---
namespace ptx = ::cuda::ptx;
constexpr int kBulkWarps = 8;  // consumers; one more warp issues the copies
constexpr int kBulkPer = 16;   // input pieces a lane holds: a warp's share of a row <= 512

struct BulkArgs {
  Product p;
  int rows_per_tile;    // R in {1, 2, 4, 8}: kBulkWarps / R warps share a row
  uint32_t tile_bytes;  // R * k * 2
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ __forceinline__ void bulk_wait(uint64_t* bar, uint32_t parity) {
  while (!ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
}
#endif

// Products in one launch (grid = one block a multiprocessor, every block resident). Tiles of R
// whole rows (contiguous in a row-major weight) go round-robin over the blocks, numbered across
// the products, so the producer runs ahead into product p + 1 while the consumers wait at the
// barrier that ends p (consumers only: the producer never arrives, its warp has left). With
// one product it is the bulk GEMV alone ("bulk x4": four launches of one product each).
struct BulkChainArgs {
  BulkArgs p[kMaxProducts];
  int n;
  uint32_t slot_bytes;  // the largest tile
  int stages;
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ void consumer_grid_barrier(unsigned* count, volatile unsigned* generation) {
  grid_barrier_with([] { asm volatile("bar.sync 1, %0;" ::"n"(kBulkWarps * 32)); }, count,
                    generation);
}
#endif

template <bool kPdl>
__global__ void __launch_bounds__((kBulkWarps + 1) * 32, 1)
    bulk_chain_kernel(const BulkChainArgs a, unsigned* bar_count, unsigned* bar_gen) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ uint64_t full[16], empty[16];
  __shared__ float red[2][kBulkWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < a.stages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], kBulkWarps);
    }
    ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
  }
  __syncthreads();
  if (kPdl) infercept::cuda::pdl_launch_dependents();
  if (warp == kBulkWarps) {
    if (lane == 0) {
      int i = 0;
      for (int p = 0; p < a.n; ++p) {
        const BulkArgs& b = a.p[p];
        const int tiles = b.p.m / b.rows_per_tile;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++i) {
          const int s = i % a.stages;
          if (i >= a.stages) bulk_wait(&empty[s], ((i / a.stages) - 1) & 1);
          ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared,
                                         &full[s], b.tile_bytes);
          ptx::cp_async_bulk(ptx::space_cluster, ptx::space_global, smem + (size_t)s * a.slot_bytes,
                             b.p.w + (size_t)t * b.rows_per_tile * b.p.k, b.tile_bytes, &full[s]);
        }
      }
    }
    return;
  }
  if (kPdl) infercept::cuda::pdl_wait();
  int i = 0;
  for (int p = 0; p < a.n; ++p) {
    const BulkArgs& b = a.p[p];
    const int R = b.rows_per_tile, nv = b.p.k / 8, tiles = b.p.m / R;
    if (p > 0) consumer_grid_barrier(bar_count, bar_gen);  // product p - 1 is done everywhere
    const int split = kBulkWarps / R, r = warp / split, part = warp % split;
    const int chunk = (nv + split - 1) / split, c_begin = part * chunk,
              c_end = min(nv, c_begin + chunk);
    uint4 xr[kBulkPer];
    const uint4* x = reinterpret_cast<const uint4*>(b.p.x);
#pragma unroll
    for (int j = 0; j < kBulkPer; ++j) {
      const int c = c_begin + lane + 32 * j;
      xr[j] = c < c_end ? x[c] : make_uint4(0, 0, 0, 0);
    }
    for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++i) {
      const int s = i % a.stages;
      bulk_wait(&full[s], (i / a.stages) & 1);
      const uint4* row = reinterpret_cast<const uint4*>(smem + (size_t)s * a.slot_bytes) + r * nv;
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kBulkPer; ++j) {
        const int c = c_begin + lane + 32 * j;
        if (c < c_end) acc += dot8(row[c], xr[j]);
      }
      __syncwarp();
      if (lane == 0) ptx::mbarrier_arrive(&empty[s]);
      acc = lab::warp_sum(acc);
      if (lane == 0) red[i & 1][warp] = acc;
      asm volatile("bar.sync 1, %0;" ::"n"(kBulkWarps * 32));
      if ((int)threadIdx.x < R) {
        float sum = 0.0f;
        for (int j = 0; j < split; ++j) sum += red[i & 1][threadIdx.x * split + j];
        b.p.out[(size_t)t * R + threadIdx.x] = sum;
      }
    }
  }
#endif
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  std::string model = "7b";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--model" && i + 1 < argc)
      model = argv[++i];
    else {
      std::fprintf(stderr, "usage: chain_lab [--model 7b|13b] [--reps N]\n");
      return 2;
    }
  }
  int hidden = 4096, inter = 11008;
  if (model == "13b") {
    hidden = 5120;
    inter = 13824;
  } else if (model != "7b") {
    std::fprintf(stderr, "chain_lab: --model 7b or 13b, got '%s'\n", model.c_str());
    return 2;
  }
  // (m, k): Q/K/V, O, gate+up, down of one Llama-2 layer (no GQA at these sizes).
  const int shapes[kMaxProducts][2] = {
      {3 * hidden, hidden}, {hidden, hidden}, {2 * inter, hidden}, {hidden, inter}};
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;

  size_t total = 0, offs[kMaxProducts];
  for (int p = 0; p < kMaxProducts; ++p) {
    offs[p] = total;
    total += (size_t)shapes[p][0] * shapes[p][1];
  }
  const double bytes = (double)total * 2;
  __nv_bfloat16* w_all;
  CK(cudaMalloc(&w_all, total * 2));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  fill_kernel<<<2048, 256, 0, s>>>(w_all, total, 12345u);
  Chain chain{};
  chain.n = kMaxProducts;
  int max_k = 0;
  std::vector<std::vector<float>> refs(kMaxProducts);
  std::vector<float*> d_ref(kMaxProducts);
  for (int p = 0; p < kMaxProducts; ++p) {
    const int m = shapes[p][0], k = shapes[p][1];
    max_k = std::max(max_k, k);
    __nv_bfloat16* x;
    float* out;
    CK(cudaMalloc(&x, (size_t)k * 2));
    CK(cudaMalloc(&out, (size_t)m * 4));
    CK(cudaMalloc(&d_ref[p], (size_t)m * 4));
    fill_kernel<<<64, 256, 0, s>>>(x, k, 777u + p);
    chain.p[p] = {w_all + offs[p], x, out, m, k};
    reference_kernel<<<m, 256, 0, s>>>(chain.p[p].w, x, d_ref[p], k);
    refs[p].resize(m);
  }
  CK(cudaStreamSynchronize(s));
  for (int p = 0; p < kMaxProducts; ++p)
    CK(cudaMemcpy(refs[p].data(), d_ref[p], refs[p].size() * 4, cudaMemcpyDeviceToHost));
  unsigned *bar, *sink;
  CK(cudaMalloc(&bar, 8));
  CK(cudaMemset(bar, 0, 8));
  CK(cudaMalloc(&sink, 4));

  std::printf(
      "## chain_lab: %s, %d SMs, L2 %.0f MiB; one Llama-2 %s layer's four products, "
      "%.1f MB of weights\n\n",
      prop.name, sms, prop.l2CacheSize / 1048576.0, model.c_str(), bytes / 1e6);
  std::printf(
      "| variant | grid | us a layer | TB/s | x 32 layers (ms) | rel err vs fp32 (worst) | NaN "
      "|\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  bool ok = true;
  auto time_it = [&](const char* name, int grid, auto&& layer, bool check) {
    const double us = time_us(s, reps, [&](int) { layer(); });
    char err[32] = "-";
    int nans = 0;
    if (check) {
      for (int p = 0; p < kMaxProducts; ++p)
        CK(cudaMemsetAsync(chain.p[p].out, 0xff, (size_t)chain.p[p].m * 4,
                           s));  // NaN until written
      layer();
      double worst = 0;
      for (int p = 0; p < kMaxProducts; ++p) {
        std::vector<float> h(chain.p[p].m);
        CK(cudaMemcpyAsync(h.data(), chain.p[p].out, h.size() * 4, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        int bad = 0;
        worst = std::max(worst, rel_error(h, refs[p], &bad));
        nans += bad;
      }
      std::snprintf(err, sizeof err, "%.1e", worst);
      if (!(worst < 1e-2) || nans > 0) ok = false;
    }
    std::printf("| %s | %d | %.1f | %.2f | %.3f | %s | %d |\n", name, grid, us, bytes / us / 1e6,
                32 * us / 1000.0, err, nans);
    std::fflush(stdout);
  };

  int per = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, read_kernel<8>, 256, 0));
  const int g_read = std::max(1, per) * sms;
  time_it(
      "read all (one kernel)", g_read,
      [&] {
        read_kernel<8>
            <<<g_read, 256, 0, s>>>(reinterpret_cast<const uint4*>(w_all), total / 8, sink);
      },
      false);
  time_it(
      "read x4 (a kernel a product)", g_read,
      [&] {
        for (int p = 0; p < kMaxProducts; ++p)
          read_kernel<8><<<g_read, 256, 0, s>>>(reinterpret_cast<const uint4*>(chain.p[p].w),
                                                (size_t)chain.p[p].m * chain.p[p].k / 8, sink);
      },
      false);
  // The engine's product four times, without and then with programmatic launches (as in its
  // steps).
  auto engine_x4 = [&] {
    for (int p = 0; p < kMaxProducts; ++p) {
      const Product& P = chain.p[p];
      infercept::cuda::gemv(P.x, P.k, infercept::DType::bf16, P.w, 1, P.m, P.k, P.out, P.m,
                            infercept::DType::f32, s);
    }
  };
  time_it("engine x4 (infercept::cuda::gemv)", 0, engine_x4, true);
  const size_t smem = (size_t)max_k * 2;
  auto prepare = [&](auto kernel) {
    if (smem > 48 * 1024)
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int b = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kWarps * 32, smem));
    return std::max(1, b) * sms;  // every block resident: the barrier's condition
  };
  const int g_chain = prepare(chain_kernel<false>);
  const int g_pre = prepare(chain_kernel<true>);
  time_it(
      "rowwarp x4 (a launch a product)", g_chain,
      [&] {
        for (int p = 0; p < kMaxProducts; ++p)
          chain_kernel<false><<<g_chain, kWarps * 32, smem, s>>>(chain, p, 1, bar, bar + 1);
      },
      true);
  time_it(
      "chain (one kernel, grid barriers)", g_chain,
      [&] {
        chain_kernel<false>
            <<<g_chain, kWarps * 32, smem, s>>>(chain, 0, kMaxProducts, bar, bar + 1);
      },
      true);
  // The preload holds a round of loads across the barrier: more registers, fewer blocks a
  // multiprocessor; the chain without it at the same grid tells the two effects apart.
  time_it(
      "chain at chain+pre's grid", g_pre,
      [&] {
        chain_kernel<false><<<g_pre, kWarps * 32, smem, s>>>(chain, 0, kMaxProducts, bar, bar + 1);
      },
      true);
  time_it(
      "chain+pre (next weight loaded before each barrier)", g_pre,
      [&] {
        chain_kernel<true><<<g_pre, kWarps * 32, smem, s>>>(chain, 0, kMaxProducts, bar, bar + 1);
      },
      true);

  infercept::cuda::set_programmatic_launch(true);
  time_it("engine x4 PDL (programmatic launches)", 0, engine_x4, true);
  infercept::cuda::set_programmatic_launch(false);
  // The bulk GEMV: tiles of the most rows (a power of two up to 8) within tile_kb, a ring of
  // ring_kb in slots of the largest tile; four launches of one product, or one of all four.
  auto bulk_args = [&](int first, int n, int ring_kb, int tile_kb) {
    BulkChainArgs ca{};
    ca.n = n;
    for (int i = 0; i < n; ++i) {
      const Product& P = chain.p[first + i];
      const size_t row_bytes = (size_t)P.k * 2;
      int R = 1;
      while (R < 8 && (size_t)(2 * R) * row_bytes <= (size_t)tile_kb * 1024 && P.m % (2 * R) == 0)
        R *= 2;
      ca.p[i] = {P, R, (uint32_t)(R * row_bytes)};
      ca.slot_bytes = std::max(ca.slot_bytes, ca.p[i].tile_bytes);
      const int split = kBulkWarps / R;
      if ((P.k / 8 + split - 1) / split > 32 * kBulkPer) {
        std::fprintf(stderr, "bulk: a warp's share of a row exceeds %d pieces\n", 32 * kBulkPer);
        std::exit(1);
      }
    }
    ca.stages = std::max(1, std::min<int>(16, (int)(((size_t)ring_kb * 1024) / ca.slot_bytes)));
    return ca;
  };
  auto smem_of = [](const BulkChainArgs& ca) { return (size_t)ca.stages * ca.slot_bytes; };
  auto launch_bulk = [&](const BulkChainArgs& ca, bool pdl) {
    auto* kern = pdl ? bulk_chain_kernel<true> : bulk_chain_kernel<false>;
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_of(ca)));
    infercept::cuda::launch_kernel(kern, dim3(sms), dim3((kBulkWarps + 1) * 32), smem_of(ca), s,
                                   pdl, ca, bar, bar + 1);
  };
  // Measured 2026-12-03 (docs/PERF.md 4.5n): tiles of 16 and 32 KB and rings of 96 and 200 KB
  // were slower; the sweep stays here to be run again.
  for (const int ring_kb : {136}) {
    for (const int tile_kb : {64}) {
      BulkChainArgs one[kMaxProducts];
      for (int p = 0; p < kMaxProducts; ++p) one[p] = bulk_args(p, 1, ring_kb, tile_kb);
      for (const bool pdl : {false, true}) {
        char name[96];
        std::snprintf(name, sizeof name, "bulk x4, ring %d KB, tiles <= %d KB%s", ring_kb, tile_kb,
                      pdl ? ", PDL" : "");
        time_it(
            name, sms,
            [&] {
              for (int p = 0; p < kMaxProducts; ++p) launch_bulk(one[p], pdl);
            },
            true);
      }
    }
  }
  // The persistent chain: one launch a layer.
  for (const auto& [ring_kb, tile_kb, pdl] : std::vector<std::tuple<int, int, bool>>{
           {96, 32, true}, {136, 64, false}, {136, 64, true}, {200, 64, false}, {200, 32, false}}) {
    const BulkChainArgs ca = bulk_args(0, kMaxProducts, ring_kb, tile_kb);
    char name[96];
    std::snprintf(name, sizeof name, "bulk chain, ring %d KB (%d stages), tiles <= %d KB%s",
                  ring_kb, ca.stages, tile_kb, pdl ? ", PDL" : "");
    time_it(
        name, sms, [&] { launch_bulk(ca, pdl); }, true);
  }
  std::printf("\n%s\n",
              ok ? "all products within 1e-2 of the fp32 reference" : "SOME PRODUCTS FAILED");
  return ok ? 0 : 1;
}
