// Paged causal attention on the CPU. One work item is (sequence, kv head, chunk of query
// rows): it gathers that head's keys and values from the paged cache into contiguous f32
// once, then serves every query head of the group (GQA) and every query row of the chunk,
// so the f16 -> f32 conversion and the block-table walk are paid once per item, not per query.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/thread_pool.h"

namespace infercept {

struct PagedKvView {
  const uint8_t* k;  // [n_blocks, block_size, n_kv_heads, head_dim] of g.dtype
  const uint8_t* v;
  KvGeometry g;
};

void paged_attention_cpu(ThreadPool& pool, const Tensor& q, const PagedKvView& kv,
                         const AttentionBatch& batch, int64_t n_heads, float scale, Tensor out);

}  // namespace infercept
