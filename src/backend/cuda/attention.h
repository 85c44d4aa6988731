// Paged attention on the GPU for any mix of prefill chunks and decode rows.
//
// The host splits the step into work items: a sequence's query rows in tiles of up to
// `rows_per_item` (a tile holds rows x query heads of one KV head, at most 32 pairs), each
// over a range of keys. Decode-like items (few pairs) over long contexts are split across
// the context into partitions, each writing an unnormalized partial (max, sum, acc): a lone
// decode then still spreads over the whole chip. The last decode partition of a row to finish
// combines the row's partials itself (a counter per row and KV head says which one is last);
// partials of the general kernel are combined by a second kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"

namespace infercept::cuda {

struct AttnItem {
  int32_t seq, row0, nrows, kbeg, kend;
  int32_t partial;  // -1: writes the output; else the first partial pair it writes
  int32_t combine;  // decode items: index into decode_combines of their row, or -1
};
struct AttnCombine {
  int32_t row0, nrows, partial, n_parts;  // parts at partial + p * nrows * n_heads
};

struct AttnPlan {
  std::vector<AttnItem> items;               // general kernel (prefill tiles, small groups of rows)
  std::vector<AttnItem> decode_items;        // decode kernel (one row each)
  std::vector<AttnCombine> combines;         // run by the combine kernel (general items)
  std::vector<AttnCombine> decode_combines;  // run by the decode kernel's last partition
  int32_t partial_pairs = 0;                 // scratch needed, in (row, head) pairs
  int32_t max_pairs = 0;  // largest rows x group of an item (sets the block size)
};

// Splits a step; `target_ctas` is about how many blocks fill the chip. A row split across
// its context gets partitions of at least `min_partition` keys (a multiple of 32). Rows are
// split only while they leave the chip idle, each into the same number of parts: one
// partition length for the whole step (a long row cut to the length of the short ones beside
// it) won on lopsided batches but lost 4% on the paper workload's steps
// (docs/DESIGN.md, "The CUDA backend").
constexpr int kAttnMinPartition = 128;
AttnPlan plan_attention(std::span<const int32_t> q_start, std::span<const int32_t> q_len,
                        std::span<const int32_t> ctx_len, int n_heads, int n_kv_heads,
                        int target_ctas, int min_partition = kAttnMinPartition);
// Scratch floats the partials of any plan need, for these head counts. A plan's decode
// combine counters (decode_combines x n_kv_heads) never outnumber its partial pairs.
int64_t attention_scratch_pairs(int n_kv_heads, int target_ctas);

// Blocks of the decode kernel one multiprocessor holds at once for these types, head size and
// query group (its occupancy, with its shared memory).
int decode_blocks_per_sm(DType act, DType kv, int head_dim, int group);

struct AttnArgs {
  const void* q;  // [rows, n_heads * head_dim], activation dtype
  int64_t q_stride;
  // This layer's K and V: [slots, n_kv_heads * head_dim] of kv_dtype (bf16, f16); of fp8 e4m3,
  // blocks of block_size slots' codes followed by their scales (KvGeometry, kv_fp8.cuh).
  const void* k_cache;
  const void* v_cache;
  void* out;
  int64_t out_stride;
  DType act_dtype, kv_dtype;
  const AttnItem* items;  // device
  int n_items;
  const AttnItem* decode_items;  // device
  int n_decode_items;
  const AttnCombine* combines;  // device
  int n_combines;
  const AttnCombine* decode_combines;  // device
  int* combine_counters;  // device, [decode_combines x n_kv_heads], zero between launches
  const int32_t *q_start, *q_len, *ctx_len, *block_tables;  // device
  int max_blocks, block_size, n_heads, n_kv_heads, head_dim, max_pairs;
  float scale;
  float* partial_acc;  // [pairs, head_dim]
  float* partial_ml;   // [pairs, 2]
  // 1: the decode kernel is launched as a programmatic dependent of the kernel before it (the
  // RoPE + KV store, or the Q/K/V product that does it) and issues its first chunk's loads
  // before waiting for it, where that chunk
  // holds only keys this step does not write. The caller sets it only when the plan, block
  // tables and context lengths were on the device before that kernel started (no upload and
  // no swap wait enqueued by this call) and the step is decode rows alone.
  int prewait;
};
void attention(const AttnArgs& a, cudaStream_t s);

// Merges the partials of `n_combines` combines (device array, none of more than `max_rows`
// rows) into `out`, as attention() does for its general items: for the split tiles of
// attention_prefill().
void attention_combine(const AttnArgs& a, const AttnCombine* d_combines, int n_combines,
                       int max_rows, cudaStream_t s);

}  // namespace infercept::cuda
