// How a step's attention is split between the kernels, decided once per step on the host
// (every layer of a step has the same batch): lone rows (decode) go to the paged CUDA-core
// kernels (plan_attention), runs of two rows and more to the tensor-core kernel
// (plan_prefill), whose tiles are split across their keys when they would leave the chip
// idle. The split partials of both share one scratch: the paged kernels' first, the
// tensor-core tiles' after them.
//
// Ablation switches, read once (docs/PERF.md 4.5f, 4.5g): INFERCEPT_ATTN_CTAS_PER_SM (blocks
// that count as filling the chip for the paged kernels, 2), INFERCEPT_ATTN_MIN_PARTITION (the
// fewest keys of a split decode row's partition, 128, a multiple of 32),
// INFERCEPT_PREFILL_MIN_Q (the fewest rows of a sequence that take the tensor-core kernel, 2;
// 64 before session 8), INFERCEPT_PREFILL_SPLIT=0 (never split its tiles) and
// INFERCEPT_ATTN_BALANCE=1 (decode rows split to one partition length for the step instead
// of equal part counts: faster on a long row beside many short ones, slower on the paper
// workload's steps of 4-7 rows, so off by default: PERF 4.5h).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_prefill.h"
#include "core/dtype.h"

namespace infercept::cuda {

struct StepAttentionPlan {
  AttnPlan paged;       // decode rows (and what the tensor-core kernel cannot take)
  PrefillPlan prefill;  // runs of two rows and more
};

class AttentionPlanner {
 public:
  AttentionPlanner() = default;  // placeholder until the device is known
  // `multiprocessors`: the device's SM count; the switches above are read here.
  explicit AttentionPlanner(int multiprocessors);

  // Blocks that fill the chip for the paged kernels.
  int target_ctas() const { return target_ctas_; }
  // The fewest keys a split row's partition gets (INFERCEPT_ATTN_MIN_PARTITION).
  int min_partition() const { return min_partition_; }
  // Partial (row, head) pairs any step's plan may need on a pool with `n_kv_heads`.
  int64_t scratch_pairs(int n_kv_heads) const;

  // The plan for batch `b`; `tensor_cores`: the tensor-core kernel can take these tensors
  // (head size, strides); `scratch_pairs`: what is allocated.
  StepAttentionPlan plan(const AttentionBatch& b, int n_heads, const KvGeometry& g, DType act,
                         bool tensor_cores, int64_t scratch_pairs);

 private:
  // Blocks of the tensor-core kernel that fill the chip: its occupancy for these types and
  // head size (asked once each) x SMs, at most target_ctas().
  int prefill_target(DType act, const KvGeometry& g);

  int multiprocessors_ = 132;
  int target_ctas_ = 264;
  int min_partition_ = kAttnMinPartition;
  int prefill_min_q_ = kPrefillMinQLen;
  bool prefill_split_ = true;
  bool balance_ = false;
  std::vector<std::pair<int, int>> prefill_targets_;  // (head size and types, blocks)
};

}  // namespace infercept::cuda
