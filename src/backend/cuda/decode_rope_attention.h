// The decode attention of a step of 1-2 decode rows alone with its RoPE and KV store folded
// in, each row's partitions merged in a thread-block cluster (Backend::self_attention on sm_90;
// PERF 4.5o), waiting per KV head on the Q/K/V product's counters (PERF 4.5p).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/cuda/attention.h"

namespace infercept::cuda {

// A step of decode rows alone (row i is sequence i's one query row), each row's RoPE and KV
// store folded into its attention: q, k and v are this step's rows as the Q/K/V product wrote
// them (unrotated; left so). Row i's keys are cut into `parts` partitions of whole 32-key
// chunks, one block each, and a row's blocks (per KV head) form a thread-block cluster that
// merges their softmax states in distributed shared memory (sm_90 and later only). The
// partition holding the row's new key rotates it and writes K and V to the row's slot.
// `a`: as for attention(), with q the unrotated rows and only ctx_len, block_tables,
// max_blocks, prewait (its first chunk's loads before waiting, if every key is older than the
// row) and the sizes read.
constexpr int kDecodeClusterMaxParts = 16;
struct DecodeRopeArgs {
  const void* k_new;  // [rows, n_kv_heads * head_dim], activation dtype
  int64_t k_stride;
  const void* v_new;
  int64_t v_stride;
  void* k_cache;  // this layer's (the same as AttnArgs' k_cache, v_cache, writable)
  void* v_cache;
  const int32_t* positions;   // device, [rows]
  const int32_t* slots;       // device, [rows]
  const float* freq_factors;  // device, [head_dim / 2], or null
  float theta_base;
  int neox;
  int parts;  // partitions (blocks, the cluster's size) a row and KV head
  // Blocks a KV head's query group is cut across (a divisor of the group, >= 1): each reads
  // the head's keys for its share of the query heads. At batch 1 a GQA model has few KV heads
  // (8 on llama3-8b: 64 blocks of 4 query heads), and each block's chain of dependent steps
  // grows with its query heads; more, narrower blocks shorten it (the keys come again from L2).
  int group_split;
  // Null, or the Q/K/V product's per-KV-head counters (GemvHeadSignal::ready): a block then
  // waits for its KV head's counter to reach ready_count (that head's q, k and v rows are
  // written) instead of for the whole product, so the attention of the first heads runs while
  // the product streams the weights of the later ones. The last of a KV head's rows x parts x
  // group_split blocks to pass sets the counter and `passed[kvh]` back to zero for the next launch.
  int* ready;
  int* passed;  // [KV heads], zero before the launch
  int ready_count;
};
void decode_rope_attention(const AttnArgs& a, const DecodeRopeArgs& r, int rows, cudaStream_t s);
// The most partitions a cluster of decode_rope_attention() may have on this device: 16 (or 8
// where 16 is refused), 0 before sm_90.
int decode_rope_max_parts();
// Partitions a row for a step of these context lengths: as many as fill about `target_ctas`
// blocks, none under `min_partition` keys unless the row has fewer, at most `max_parts`.
int decode_rope_parts(std::span<const int32_t> ctx_len, int n_kv_heads, int target_ctas,
                      int min_partition, int max_parts);
}  // namespace infercept::cuda
