// Tensor-core flash attention for prefill (and chunked prefill) over the paged KV cache.
//
// Same semantics as attention() (attention.h) for the rows it covers: a tile is up to
// kPrefillTileM consecutive query rows of one sequence; one CTA per (tile, query head) holds
// Q in registers and streams the sequence's keys in 64-token tiles through the block table
// (cp.async, two stages), S = Q K^T and O += P V on mma.sync m16n8k16 (bf16 or f16 operands
// in the KV cache's dtype, or for an fp8 cache in the activation type, its tiles dequantized
// in shared memory; fp32 accumulate) with an online softmax; key tiles entirely above the
// diagonal are skipped and only the diagonal tiles are masked.
//
// Integration: plan_prefill() picks the sequences with q_len >= min_q_len and tiles all of
// their rows; every other row goes to attention() as before (e.g. plan_attention() with
// q_len set to 0 for the sequences plan_prefill() took). Both kernels may run in one step:
// they write disjoint rows of `out`.
//
// Short chunks over long contexts (a resumed request's tool output, the last piece of a
// recomputation) make few tiles: n_heads CTAs for the whole chunk, each streaming the whole
// context, would leave most of the chip idle. So while the tiles fill less than
// `target_ctas`, each tile's keys are split into partitions of at least `min_partition` keys
// (whole 64-key tiles), each writing an unnormalized partial (max, sum, acc) in
// plan_attention()'s layout, which attention_combine() merges afterwards.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/attention.h"

namespace infercept::cuda {

inline constexpr int kPrefillTileM = 128;  // query rows per tile (8 warps x 16 rows)
// Default: shorter sequences (one row: decode) go to attention(). From two rows on, the
// CUDA-core kernels read the context once per row (decode kernel) or in a scalar kernel
// (general items): 1-63 rows over a few thousand keys of a 7B cost a step 8-13 ms more on
// the H200 than decode rows alone (docs/PERF.md 4.5g).
inline constexpr int kPrefillMinQLen = 2;
inline constexpr int kPrefillMinPartition = 256;  // keys per partition of a split tile

struct PrefillTile {
  int32_t seq;      // index into q_start / q_len / ctx_len / block_tables
  int32_t row0;     // first query row (absolute row of q and out)
  int32_t nrows;    // 1 .. kPrefillTileM
  int32_t kbeg;     // this partition's keys [kbeg, kend): kbeg a multiple of 64; the whole
  int32_t kend;     //   tile is [0, the keys its last row sees)
  int32_t partial;  // -1: writes `out`; else its first partial pair (tile row r, head h at
                    //   partial + r * n_heads + h)
};

struct PrefillPlan {
  std::vector<PrefillTile> tiles;     // the tiles with the most keys first
  std::vector<AttnCombine> combines;  // one per split tile, for attention_combine()
  int32_t partial_pairs = 0;          // scratch used from partial_base on, in (row, head) pairs
  int max_combine_rows = 1;           // rows of its largest combine (attention_combine's grid)
};

// Tiles every sequence with q_len >= max(1, min_q_len) into kPrefillTileM-row tiles, the
// tiles with the most keys first (longest-first scheduling over the grid), and splits each
// into up to target_ctas / (tiles x n_heads) parts (target_ctas: the kernel's resident blocks,
// prefill_blocks_per_sm() x SMs; 0: never split), as long as the partials fit pairs
// [partial_base, partial_limit). Requires ctx_len[s] >= q_len[s].
PrefillPlan plan_prefill(std::span<const int32_t> q_start, std::span<const int32_t> q_len,
                         std::span<const int32_t> ctx_len, int n_heads,
                         int min_q_len = kPrefillMinQLen, int target_ctas = 0,
                         int64_t partial_base = 0, int64_t partial_limit = 0,
                         int min_partition = kPrefillMinPartition);
// Partial pairs any plan_prefill() with at most this target may use: all parts together are
// at most target_ctas / n_heads tiles of at most kPrefillTileM rows x n_heads.
int64_t prefill_scratch_pairs(int target_ctas);
// Blocks of attention_prefill() resident on one multiprocessor for these types and head size
// (one at head size 128: 226 registers a thread; two below).
int prefill_blocks_per_sm(DType act, DType kv, int head_dim);

// Whether attention_prefill() handles this head size (32, 64, 128).
bool prefill_supports_head_dim(int head_dim);

// Which kernel attention_prefill() runs: by default the wgmma one (attention_prefill_wgmma.h)
// where it handles the types, head size and card, else the mma.sync one.
enum class PrefillKernel { automatic, mma_sync, wgmma };

// Attention for the rows of the tiles (d_tiles: device array of n_tiles). Uses q, q_stride,
// k_cache, v_cache, out, out_stride, act_dtype, kv_dtype, q_start, q_len, ctx_len,
// block_tables, max_blocks, block_size, n_heads, n_kv_heads, head_dim, scale, and for split
// tiles partial_acc / partial_ml of `a`; ignores items, combines and max_pairs. q/out
// strides must be multiples of 8 elements and the pointers 16-byte aligned. Grid:
// (n_heads, n_tiles). Split tiles still need attention_combine() afterwards.
void attention_prefill(const AttnArgs& a, const PrefillTile* d_tiles, int n_tiles, cudaStream_t s,
                       PrefillKernel kernel = PrefillKernel::automatic);

}  // namespace infercept::cuda
