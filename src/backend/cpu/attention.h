// Paged causal attention on the CPU. One work item is (sequence, kv head, chunk of query
// rows): it gathers that head's keys and values from the paged cache into contiguous f32
// once, then serves every query head of the group (GQA) and every query row of the chunk,
// so the f16 -> f32 conversion and the block-table walk are paid once per item, not per query.
#pragma once

#include <atomic>
#include <cstdint>

#include "backend/backend.h"
#include "core/thread_pool.h"

namespace infercept {

struct PagedKvView {
  const uint8_t* k;  // [n_blocks, block_size, n_kv_heads, head_dim] of g.dtype
  const uint8_t* v;
  KvGeometry g;
};

// The order in which scores and P*V are summed (attention_orders.h says why).
//   fast: scores in llamafile tinyBLAS's order, P*V one FMA chain per element in position
//     order. A row's bits depend on its position and operands only: a decode row and the same
//     row inside a prefill chunk, recomputed after preemption, or kept by a resumed request
//     agree exactly.
//   llama_cpp: llama.cpp's own orders (flash attention off): rows of a sequence computing
//     two or more rows in the step as it sums a batch (tinyBLAS), a lone row as it sums a
//     single token (ggml_vec_dot_f16), so a prompt and its decode steps get llama.cpp's
//     bits; a recomputed or resumed row may then differ from the original in the last bits
//     (as in llama.cpp), and P*V costs ~1.5-1.8x.
enum class AttentionOrder { fast, llama_cpp };

// `stop`: once it reads true, the work items not yet started are skipped (their rows of
// `out` are left as they were); the caller then discards the step (Backend::set_interrupt).
void paged_attention_cpu(ThreadPool& pool, const Tensor& q, const PagedKvView& kv,
                         const AttentionBatch& batch, int64_t n_heads, float scale, Tensor out,
                         AttentionOrder order = AttentionOrder::fast,
                         const std::atomic<bool>* stop = nullptr);

}  // namespace infercept
