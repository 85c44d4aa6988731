// The one-row GEMV whose weight streams through shared memory by bulk copies (gemv.h's
// gemv_bulk): the fastest product form in bench/cuda/chain_lab.cu, off in the engine's steps
// where it loses the programmatic-launch overlap (docs/PERF.md 4.5n).
#include <cuda/ptx>

#include <algorithm>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_pieces.cuh"
#include "backend/cuda/switches.h"
#include "core/check.h"

namespace infercept::cuda {
namespace {

namespace ptx = ::cuda::ptx;

constexpr int kConsumerWarps = 8;  // compute from the ring; one more warp issues the copies
constexpr int kConsumers = kConsumerWarps * 32;
constexpr int kXPerLane = 16;  // input pieces a lane holds: a warp's share of a row <= 512
constexpr int kMaxStages = 8;
// A tile is at most this many bytes (gate and up rows together when gated): 64 KB measured
// faster than 32 KB and 16 KB (docs/PERF.md 4.5n: a fixed cost per tile).
constexpr uint32_t kTileBytes = 64u << 10;
// The ring: two 64 KB tiles in flight a multiprocessor (three measured the same).
constexpr uint32_t kRingBytes = 136u << 10;
// The block's barriers and partial sums, after the ring and the staged input in the dynamic
// shared memory (the stages-first layout of DecodeKernelSmem, attention.cu; measured neutral
// here, PERF 4.5u).
struct BulkShared {
  uint64_t full[kMaxStages], empty[kMaxStages];
  float red[2][kConsumerWarps], red2[2][kConsumerWarps];
};
// The ring, the staged input row (k <= 32768, as the input registers allow) and BulkShared
// at most.
constexpr size_t kMaxShared = kRingBytes + (64u << 10) + sizeof(BulkShared);

struct BulkArgs {
  const void* x;
  int k;
  const float* norm;
  float eps;
  UnitSegment seg[kGemvMaxSegments];  // units: tiles of rows_per_tile rows
  int n_segments;
  int total_tiles;
  int rows_per_tile;  // R: kConsumerWarps / R warps share a row
  int stages;
  uint32_t slot_bytes;  // R rows (2R when gated)
};

// Where BulkShared starts: after the ring and, with the norm prologue, the staged input row.
__host__ __device__ inline size_t bulk_shared_at(const BulkArgs& b, bool norm) {
  return ((size_t)b.stages * b.slot_bytes + (norm ? (size_t)b.k * 2 : 0) + 15) / 16 * 16;
}

// The device code exists for sm_90 and later only (bulk copies, mbarriers); the PTX built for
// older cards has empty kernels that gemv_bulk_fits() never lets launch.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// The consumer warps' own barrier (the producer warp has left by then).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}

__device__ __forceinline__ void wait_parity(uint64_t* bar, uint32_t parity) {
  while (!ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
}

struct ConsumersBarrier {
  __device__ void operator()() const { consumers_sync(); }
};
#endif

// One input row (decode at batch 1) times the weights of up to three segments, the weight
// streamed through shared memory: one block a multiprocessor; its last warp's first lane
// issues bulk copies (cp.async.bulk, the multiprocessor's copy engine) of tiles of R whole
// rows (contiguous in a row-major weight; R gate rows then R up rows when gated) into a ring
// of `stages` slots, each with a "full" barrier the copy completes and an "empty" barrier the
// eight consumer warps arrive at once they have read it. Weights depend on nothing, so the
// ring fills before pdl_wait(): a block that becomes resident while the previous kernel
// drains streams its weight meanwhile. A consumer warp owns one row of a tile (R = 8) or a
// 1/split share of one (split = 8 / R, its input pieces held in registers); the shares meet
// in shared memory and the tile's first R threads apply the epilogue, rounded as gemv.cu's.
template <typename T, typename OutT, bool kNorm, GemvEpilogue kEpi>
__global__ void __launch_bounds__(kConsumers + 32, 1) gemv_bulk_kernel(const BulkArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kGated = kEpi == GemvEpilogue::gated;
  // The ring, then the staged input, then BulkShared.
  extern __shared__ __align__(128) unsigned char smem[];
  auto& sh = *reinterpret_cast<BulkShared*>(smem + bulk_shared_at(a, kNorm));
  uint64_t *full = sh.full, *empty = sh.empty;
  auto red = sh.red, red2 = sh.red2;
  const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
  const int R = a.rows_per_tile, k = a.k, nv = k / 8;
  const size_t row_bytes = (size_t)k * sizeof(T);
  if (threadIdx.x == 0) {
    for (int s = 0; s < a.stages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], kConsumerWarps);
    }
    ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
  }
  __syncthreads();
  pdl_launch_dependents();  // the next kernel may become resident as our blocks retire
  if (warp == kConsumerWarps) {
    if (lane != 0) return;
    int i = 0;
    for (int t = (int)blockIdx.x; t < a.total_tiles; t += (int)gridDim.x, ++i) {
      const UnitSegment& g = a.seg[segment_of(a.seg, a.n_segments, t)];
      const int row0 = (t - g.first) * R, rows = min(R, g.m - row0);
      const uint32_t bytes = (uint32_t)(rows * row_bytes);
      const int s = i % a.stages;
      if (i >= a.stages) wait_parity(&empty[s], ((i / a.stages) - 1) & 1);
      unsigned char* slot = smem + (size_t)s * a.slot_bytes;
      ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &full[s],
                                     kGated ? 2 * bytes : bytes);
      ptx::cp_async_bulk(ptx::space_cluster, ptx::space_global, slot,
                         static_cast<const T*>(g.w) + (size_t)row0 * k, bytes, &full[s]);
      if constexpr (kGated)
        ptx::cp_async_bulk(ptx::space_cluster, ptx::space_global, slot + R * row_bytes,
                           static_cast<const T*>(g.w2) + (size_t)row0 * k, bytes, &full[s]);
    }
    return;
  }
  pdl_wait();  // the input is the previous kernel's output
  const uint4* xin = static_cast<const uint4*>(a.x);
  if constexpr (kNorm) {
    uint4* xs = reinterpret_cast<uint4*>(smem + (size_t)a.stages * a.slot_bytes);
    // As gemv.cu's norm prologue (the same sums in the same order, so the same bits).
    stage_normalized<T, kConsumers, 1>(static_cast<const T*>(a.x), 0, 1, a.k, a.norm, a.eps, xs,
                                       a.k / 8, ConsumersBarrier{});
    xin = xs;
  }
  const int split = kConsumerWarps / R, r = warp / split, part = warp % split;
  const int chunk = (nv + split - 1) / split, c_begin = part * chunk,
            c_end = min(nv, c_begin + chunk);
  uint4 xr[kXPerLane];
#pragma unroll
  for (int j = 0; j < kXPerLane; ++j) {
    const int c = c_begin + lane + 32 * j;
    xr[j] = c < c_end ? xin[c] : make_uint4(0, 0, 0, 0);
  }
  int i = 0;
  for (int t = (int)blockIdx.x; t < a.total_tiles; t += (int)gridDim.x, ++i) {
    const int s = i % a.stages;
    wait_parity(&full[s], (i / a.stages) & 1);
    const unsigned char* slot = smem + (size_t)s * a.slot_bytes;
    const uint4* wrow = reinterpret_cast<const uint4*>(slot + r * row_bytes);
    const uint4* urow = reinterpret_cast<const uint4*>(slot + (R + r) * row_bytes);
    const UnitSegment& g = a.seg[segment_of(a.seg, a.n_segments, t)];
    const int row0 = (t - g.first) * R, rows = min(R, g.m - row0);
    float acc = 0.0f, acc2 = 0.0f;
    if (r < rows) {  // a short last tile leaves the slot's other rows unwritten
#pragma unroll
      for (int j = 0; j < kXPerLane; ++j) {
        const int c = c_begin + lane + 32 * j;
        if (c < c_end) {
          acc += dot8<T>(wrow[c], xr[j]);
          if constexpr (kGated) acc2 += dot8<T>(urow[c], xr[j]);
        }
      }
    }
    __syncwarp();
    if (lane == 0) ptx::mbarrier_arrive(&empty[s]);  // the slot may refill
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      acc += __shfl_xor_sync(0xffffffffu, acc, off);
      if constexpr (kGated) acc2 += __shfl_xor_sync(0xffffffffu, acc2, off);
    }
    if (lane == 0) {
      red[i & 1][warp] = acc;
      red2[i & 1][warp] = acc2;
    }
    consumers_sync();  // (red[i & 1] is written again two tiles on, after the next sync)
    if ((int)threadIdx.x >= rows) continue;
    float v = 0.0f, v2 = 0.0f;
    for (int j = 0; j < split; ++j) {
      v += red[i & 1][threadIdx.x * split + j];
      v2 += red2[i & 1][threadIdx.x * split + j];
    }
    const int row = row0 + (int)threadIdx.x;
    OutT* out = static_cast<OutT*>(g.out) + row;
    write_output<kEpi>(out, v, v2, g.bias != nullptr ? g.bias + row : nullptr);
  }
#endif
}

// Rows a tile takes for these arguments: the most (a power of two up to 8) within the tile
// size whose warp shares fit the lanes' input registers; 0 when none does.
int rows_per_tile(const GemvArgs& a) {
  const size_t row_bytes = (size_t)a.k * 2 * (a.epilogue == GemvEpilogue::gated ? 2 : 1);
  const int nv = a.k / 8;
  for (int R = 8; R >= 1; R /= 2) {
    const int split = kConsumerWarps / R;
    if (R * row_bytes <= kTileBytes && (nv + split - 1) / split <= 32 * kXPerLane) return R;
  }
  return 0;
}

BulkArgs bulk_args(const GemvArgs& a, int R) {
  BulkArgs b{};
  b.x = a.x;
  b.k = a.k;
  b.norm = a.norm;
  b.eps = a.eps;
  b.n_segments = a.n_segments;
  b.total_tiles = lay_out_segments(a, R, false, b.seg);
  b.rows_per_tile = R;
  b.slot_bytes = (uint32_t)(R * (size_t)a.k * 2 * (a.epilogue == GemvEpilogue::gated ? 2 : 1));
  b.stages = std::clamp((int)(kRingBytes / b.slot_bytes), 2, kMaxStages);
  return b;
}

size_t shared_bytes(const BulkArgs& b, bool norm) {
  return bulk_shared_at(b, norm) + sizeof(BulkShared);
}

template <typename T, typename OutT, bool kNorm, GemvEpilogue kEpi>
void launch(const BulkArgs& b, cudaStream_t s) {
  auto* kernel = gemv_bulk_kernel<T, OutT, kNorm, kEpi>;
  const size_t smem = shared_bytes(b, kNorm);
  // One block a multiprocessor (the ring takes most of its shared memory).
  const int grid =
      resident_grid(reinterpret_cast<const void*>(kernel), kConsumers + 32, smem, kMaxShared);
  launch_kernel(kernel, dim3((unsigned)std::min(b.total_tiles, grid)), dim3(kConsumers + 32), smem,
                s, programmatic_launch(), b);
}

template <typename T>
void launch_typed(const GemvArgs& a, const BulkArgs& b, cudaStream_t s) {
  const bool norm = a.norm != nullptr;
  switch (a.epilogue) {
    case GemvEpilogue::store:
      if (norm) return launch<T, T, true, GemvEpilogue::store>(b, s);
      if (a.out_dtype == DType::f32) return launch<T, float, false, GemvEpilogue::store>(b, s);
      return launch<T, T, false, GemvEpilogue::store>(b, s);
    case GemvEpilogue::accumulate:
      return launch<T, T, false, GemvEpilogue::accumulate>(b, s);
    case GemvEpilogue::gated:
      return launch<T, T, true, GemvEpilogue::gated>(b, s);
    case GemvEpilogue::rope_store:
      break;
  }
  CHECK_MSG(false, "gemv_bulk: the rope_store epilogue is not taken");
}

}  // namespace

bool gemv_bulk_fits(const GemvArgs& a) {
  if (device_compute_major() < 9 || a.n != 1 || a.epilogue == GemvEpilogue::rope_store ||
      !gemv_fits(a))
    return false;
  const int R = rows_per_tile(a);
  if (R == 0) return false;
  const BulkArgs b = bulk_args(a, R);
  return shared_bytes(b, a.norm != nullptr) <= kMaxShared;
}

void gemv_bulk(const GemvArgs& a, cudaStream_t s) {
  CHECK(gemv_bulk_fits(a));
  const BulkArgs b = bulk_args(a, rows_per_tile(a));
  if (a.in_dtype == DType::bf16)
    launch_typed<__nv_bfloat16>(a, b, s);
  else
    launch_typed<__half>(a, b, s);
}

}  // namespace infercept::cuda
