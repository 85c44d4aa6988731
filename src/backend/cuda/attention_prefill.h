// Tensor-core flash attention for prefill (and chunked prefill) over the paged KV cache.
//
// Same semantics as attention() (attention.h) for the rows it covers: a tile is up to
// kPrefillTileM consecutive query rows of one sequence; one CTA per (tile, query head) holds
// Q in registers and streams the sequence's keys in 64-token tiles through the block table
// (cp.async, two stages), S = Q K^T and O += P V on mma.sync m16n8k16 (bf16 or f16 operands
// in the KV cache's dtype, fp32 accumulate) with an online softmax; key tiles entirely above
// the diagonal are skipped and only the diagonal tiles are masked.
//
// Integration: plan_prefill() picks the sequences with q_len >= min_q_len and tiles all of
// their rows; every other row goes to attention() as before (e.g. plan_attention() with
// q_len set to 0 for the sequences plan_prefill() took). Both kernels may run in one step:
// they write disjoint rows of `out`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/attention.h"

namespace infercept::cuda {

inline constexpr int kPrefillTileM = 128;   // query rows per tile (8 warps x 16 rows)
inline constexpr int kPrefillMinQLen = 64;  // default: shorter sequences go to attention()

struct PrefillTile {
  int32_t seq;    // index into q_start / q_len / ctx_len / block_tables
  int32_t row0;   // first query row (absolute row of q and out)
  int32_t nrows;  // 1 .. kPrefillTileM
};

// Tiles every sequence with q_len >= max(1, min_q_len) into kPrefillTileM-row tiles, the
// tiles with the most keys first (longest-first scheduling over the grid). Requires
// ctx_len[s] >= q_len[s].
std::vector<PrefillTile> plan_prefill(std::span<const int32_t> q_start,
                                      std::span<const int32_t> q_len,
                                      std::span<const int32_t> ctx_len,
                                      int min_q_len = kPrefillMinQLen);

// Whether attention_prefill() handles this head size (32, 64, 128).
bool prefill_supports_head_dim(int head_dim);

// Attention for the rows of the tiles (d_tiles: device array of n_tiles). Uses q, q_stride,
// k_cache, v_cache, out, out_stride, act_dtype, kv_dtype, q_start, q_len, ctx_len,
// block_tables, max_blocks, block_size, n_heads, n_kv_heads, head_dim and scale of `a`;
// ignores items, combines, max_pairs and the partial buffers. q/out strides must be
// multiples of 8 elements and the pointers 16-byte aligned. Grid: (n_heads, n_tiles).
void attention_prefill(const AttnArgs& a, const PrefillTile* d_tiles, int n_tiles, cudaStream_t s);

}  // namespace infercept::cuda
