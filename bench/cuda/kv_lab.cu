// kv_lab.cu: how fast the decode attention's KV reads can go, by cache layout and grid order
// (docs/DESIGN.md, "The CUDA backend": the decode kernel's shared-memory layout).
//
// At a decode batch of 32-128 the attention reads more than the weights (a 7B step at
// context 1,024: 17 GB of KV at batch 32 against 13 GB of weights), and the engine's decode
// kernel (attention.cu) streams it at ~3.1-3.4 TB/s against the 4.5 a plain read gets. This
// lab reads the same bytes in the kernel's pattern with no math: blocks of 4 warps, one a
// (sequence, KV head) pair, each warp copying 32-key chunks of K and V rows (256 bytes a row
// at head size 128) into its shared-memory stage by cp.async, all of a chunk at once, then
// the next chunk. Variants:
//   token-major, items fastest    the engine's cache ([slot][KV head][head dim]: a head's
//                                 row every 8 KB on a 32-head model) and grid order
//   token-major, heads fastest    the same, the grid's x the KV head: the blocks resident
//                                 together read every head of the same rows
//   head-major                    each 16-token block of the cache stored [KV head][token]
//                                 [head dim]: a pair's 16 rows contiguous (4 KB)
//   dense read                    the same bytes by lab_util.cuh's grid-stride read_kernel<8>
// and the stage's layout: pieces in order, or XOR-swizzled by 16-byte piece (the engine's
// DecodeStage) or by 32-byte pair of pieces (stage_piece); and with the engine's stage, a
// number of 16-byte shared-memory reads a lane after each chunk (the math's stage traffic
// without the math); and the chunks copied by bulk copies instead (bulk_read).
// Each case: the mean of --reps passes between two CUDA events after three warm-up passes
// (lab_util.cuh's time_us); bytes over time.
//
//   .carry/bin/kv_lab [--seqs 32] [--ctx 1025] [--heads 32] [--reps 20] [--pool-layers L --layer l]
//                       [--extra-smem N]

#include <cuda_runtime.h>
#include <cuda/ptx>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_util.h"
#include "lab_util.cuh"

namespace {

constexpr int kHd = 128;                            // bf16 elements a row
constexpr int kPieces = kHd * 2 / 16;               // 16-byte pieces a row (16)
constexpr int kWarps = 4;                           // a block's warps, as DecodeStage
constexpr int kChunk = 32;                          // keys a warp's chunk
constexpr int kStagePieces = 2 * kChunk * kPieces;  // K and V rows of a chunk

struct Shape {
  int seqs, ctx, heads;
};

// The byte offset of (seq, token, head)'s row in a K (or V) cache of the layout.
__device__ __forceinline__ int64_t row_offset(const Shape& s, int layout, int seq, int t, int h) {
  if (layout == 0)  // token-major: [seq][token][head][hd]
    return (((int64_t)seq * s.ctx + t) * s.heads + h) * (kHd * 2);
  // head-major in 16-token blocks: [seq][token / 16][head][token % 16][hd]
  const int64_t blocks_per_seq = (s.ctx + 15) / 16;
  return ((((int64_t)seq * blocks_per_seq + t / 16) * s.heads + h) * 16 + t % 16) * (kHd * 2);
}

// Where a row's 16-byte piece goes in a warp's stage. 0: in order; 1: the engine's
// DecodeStage::piece (XOR of the piece with the row, 16-byte granularity); 2: the XOR on
// 32-byte pairs of pieces (the two halves of a global sector stay together), the row's
// parity flipping the halves; 3: the XOR on pairs, halves in order.
__device__ __forceinline__ int stage_piece(int swizzle, int row, int p) {
  switch (swizzle) {
    case 1:
      return row * kPieces + (p ^ (row % kPieces));
    case 2:
      return row * kPieces + 2 * ((p / 2) ^ (row / 2 % (kPieces / 2))) + ((p % 2) ^ (row % 2));
    case 3:
      return row * kPieces + 2 * ((p / 2) ^ (row % (kPieces / 2))) + p % 2;
    default:
      return row * kPieces + p;
  }
}

// One block a (seq, head) pair; its warps copy their chunks into their stages in turn.
__global__ void __launch_bounds__(kWarps * 32)
    chunk_read(const char* k, const char* v, Shape s, int layout, int heads_fastest, int swizzle,
               int lds, uint32_t* sink) {
  extern __shared__ uint4 stage[];
  const int seq = heads_fastest ? blockIdx.y : blockIdx.x;
  const int h = heads_fastest ? blockIdx.x : blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint4* my = stage + warp * kStagePieces;
  unsigned acc = 0;
  for (int c0 = warp * kChunk; c0 < s.ctx; c0 += kWarps * kChunk) {
    // 2 rows an instruction: lanes 0-15 row r, 16-31 row r + 1, a piece each.
    for (int r0 = 0; r0 < kChunk; r0 += 2) {
      const int r = r0 + lane / kPieces, p = lane % kPieces;
      const int t = min(c0 + r, s.ctx - 1);
      const int64_t off = row_offset(s, layout, seq, t, h);
      infercept::cuda::cp_async16(my + stage_piece(swizzle, r, p), k + off + p * 16, true);
      infercept::cuda::cp_async16(my + kChunk * kPieces + stage_piece(swizzle, r, p),
                                  v + off + p * 16, true);
    }
    infercept::cuda::cp_async_commit();
    infercept::cuda::cp_async_wait<0>();
    __syncwarp();
    acc ^= my[lane].x ^ my[kStagePieces - 1 - lane].w;  // touch the stage
    // `lds` 16-byte reads of the stage a lane, as the kernel's scores and values make (about
    // 50 a chunk at head size 128), while the other warps' copies are in flight.
    for (int r = 0; r < lds; ++r) {
      const uint4 q = my[(lane + 32 * r) % kStagePieces];
      acc ^= q.x ^ q.y ^ q.z ^ q.w;
    }
    __syncwarp();
  }
  if (acc == 0x12345678u) sink[0] = acc;  // keeps the copies from being dropped
}

// The same chunks copied by the multiprocessor's bulk-copy engine (cp.async.bulk, sm_90):
// each lane its key's K row and V row (256 bytes each) into the stage in order, completion on
// the warp's mbarrier; then `lds` stage reads a lane as chunk_read's.
__global__ void __launch_bounds__(kWarps * 32)
    bulk_read(const char* k, const char* v, Shape s, int lds, uint32_t* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace ptx = ::cuda::ptx;
  extern __shared__ __align__(128) uint4 stage[];
  __shared__ uint64_t bar[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    ptx::mbarrier_init(&bar[warp], 1);
    ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
  }
  __syncwarp();
  uint4* my = stage + warp * kStagePieces;
  unsigned acc = 0;
  uint32_t parity = 0;
  for (int c0 = warp * kChunk; c0 < s.ctx; c0 += kWarps * kChunk) {
    if (lane == 0)
      ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared,
                                     &bar[warp], 2u * kChunk * kHd * 2);
    __syncwarp();
    const int t = min(c0 + lane, s.ctx - 1);
    const int64_t off = row_offset(s, 0, blockIdx.x, t, blockIdx.y);
    ptx::cp_async_bulk(ptx::space_cluster, ptx::space_global, my + lane * kPieces, k + off, kHd * 2,
                       &bar[warp]);
    ptx::cp_async_bulk(ptx::space_cluster, ptx::space_global, my + (kChunk + lane) * kPieces,
                       v + off, kHd * 2, &bar[warp]);
    while (!ptx::mbarrier_try_wait_parity(&bar[warp], parity)) {
    }
    parity ^= 1;
    acc ^= my[lane].x ^ my[kStagePieces - 1 - lane].w;
    for (int r = 0; r < lds; ++r) {
      const uint4 q = my[(lane + 32 * r) % kStagePieces];
      acc ^= q.x ^ q.y ^ q.z ^ q.w;
    }
    __syncwarp();  // every lane is done with the stage before the next chunk's copies
  }
  if (acc == 0x12345678u) sink[0] = acc;
#endif
}

int arg(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const Shape s{arg(argc, argv, "--seqs", 32), arg(argc, argv, "--ctx", 1025),
                arg(argc, argv, "--heads", 32)};
  const int reps = arg(argc, argv, "--reps", 20);
  const int64_t blocks_per_seq = (s.ctx + 15) / 16;
  // Sized for the head-major layout's whole 16-token blocks; the token-major one uses less.
  const int64_t bytes = (int64_t)s.seqs * blocks_per_seq * 16 * s.heads * kHd * 2;
  const double read = 2.0 * s.seqs * s.ctx * s.heads * kHd * 2;  // K and V bytes a pass
  char *k = nullptr, *v = nullptr;
  uint32_t* sink = nullptr;
  // --pool-layers L: K and V as the engine's cache holds them, planes of one allocation (layer
  // l's K plane 2l, its V plane 2l + 1; CudaKvStorage), the lab reading layer --layer's;
  // otherwise an allocation each.
  const int pool_layers = arg(argc, argv, "--pool-layers", 0);
  const int layer = arg(argc, argv, "--layer", 0);
  if (pool_layers > 0) {
    const int64_t plane = (bytes + (128 << 10) - 1) / (128 << 10) * (128 << 10);
    char* pool = nullptr;
    CK(cudaMalloc(&pool, 2 * pool_layers * plane));
    k = pool + 2 * (int64_t)(layer % pool_layers) * plane;
    v = k + plane;
    std::printf("(K and V: planes %d and %d of one %.1f GB allocation)\n",
                2 * (layer % pool_layers), 2 * (layer % pool_layers) + 1,
                2.0 * pool_layers * plane / 1e9);
  } else {
    CK(cudaMalloc(&k, bytes));
    CK(cudaMalloc(&v, bytes));
  }
  CK(cudaMalloc(&sink, 4));
  // Values that do not repeat, as a model's K and V do not (lab_util.cuh's hash).
  lab::fill_kernel<<<1024, 256>>>(reinterpret_cast<__nv_bfloat16*>(k), bytes / 2, 1);
  lab::fill_kernel<<<1024, 256>>>(reinterpret_cast<__nv_bfloat16*>(v), bytes / 2, 2);
  CK(cudaDeviceSynchronize());
  // --extra-smem N: N more bytes of shared memory a block than its stages (the engine's
  // decode kernel holds ~0.5 KB more: its scaled query, merge scalars), which moves the
  // multiprocessor's split of L1 and shared memory for three blocks from 196 KB shared to 228.
  const size_t smem =
      sizeof(uint4) * kWarps * kStagePieces + (size_t)arg(argc, argv, "--extra-smem", 0);
  CK(cudaFuncSetAttribute(chunk_read, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  auto time = [&](auto&& launch) {  // ms a pass
    return lab::time_us(0, reps, [&](int) { launch(); }) / 1e3;
  };
  std::printf(
      "## kv_lab: %d sequences x %d keys x %d KV heads, head size %d, %.1f MB of K and V a "
      "pass\n\n",
      s.seqs, s.ctx, s.heads, kHd, read / 1e6);
  std::printf("| variant | blocks | us | TB/s |\n|---|---:|---:|---:|\n");
  struct Case {
    const char* name;
    int layout, heads_fastest, swizzle, lds = 0;
  };
  for (const Case c :
       {Case{"token-major, items fastest, stage in order", 0, 0, 0},
        Case{"token-major, heads fastest, stage in order", 0, 1, 0},
        Case{"head-major, items fastest, stage in order", 1, 0, 0},
        Case{"head-major, heads fastest, stage in order", 1, 1, 0},
        Case{"token-major, items fastest, 16-byte XOR stage (the engine)", 0, 0, 1},
        Case{"token-major, items fastest, 32-byte XOR stage, halves by row", 0, 0, 2},
        Case{"token-major, items fastest, 32-byte XOR stage", 0, 0, 3},
        Case{"the engine's, 16 stage reads a lane a chunk", 0, 0, 1, 16},
        Case{"the engine's, 48 stage reads a lane a chunk", 0, 0, 1, 48},
        Case{"the engine's, 96 stage reads a lane a chunk", 0, 0, 1, 96}}) {
    const dim3 grid = c.heads_fastest ? dim3(s.heads, s.seqs) : dim3(s.seqs, s.heads);
    const float ms = time([&] {
      chunk_read<<<grid, kWarps * 32, smem>>>(k, v, s, c.layout, c.heads_fastest, c.swizzle, c.lds,
                                              sink);
    });
    CK(cudaGetLastError());
    std::printf("| %s | %d | %.1f | %.2f |\n", c.name, s.seqs * s.heads, ms * 1e3,
                read / (ms * 1e-3) / 1e12);
  }
  CK(cudaFuncSetAttribute(bulk_read, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  for (const int lds : {0, 48}) {
    const float ms =
        time([&] { bulk_read<<<dim3(s.seqs, s.heads), kWarps * 32, smem>>>(k, v, s, lds, sink); });
    CK(cudaGetLastError());
    std::printf(
        "| token-major, bulk copies (cp.async.bulk), %d stage reads a lane a chunk | %d | %.1f | "
        "%.2f |\n",
        lds, s.seqs * s.heads, ms * 1e3, read / (ms * 1e-3) / 1e12);
  }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // The same bytes by lab_util.cuh's grid-stride read (8 loads in flight a thread): K's, then V's.
  const size_t n = (size_t)(read / 2) / 16;
  const float ms = time([&] {
    lab::read_kernel<8><<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(k), n, sink);
    lab::read_kernel<8><<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(v), n, sink);
  });
  std::printf("| dense read (read 8, two grid-stride kernels) | %d | %.1f | %.2f |\n", sms * 8,
              ms * 1e3, read / (ms * 1e-3) / 1e12);
  return 0;
}
