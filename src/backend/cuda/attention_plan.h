// How a step's attention is split between the kernels, decided once per step on the host
// (every layer of a step has the same batch): lone rows (decode) go to the paged CUDA-core
// kernels (plan_attention), runs of two rows and more to the tensor-core kernel
// (plan_prefill), whose tiles are split across their keys when they would leave the chip
// idle. The split partials of both share one scratch: the paged kernels' first, the
// tensor-core tiles' after them.
//
// The paged kernels count 2 blocks a multiprocessor as filling the chip and split a decode
// row into partitions of at least kAttnMinPartition keys; sequences of kPrefillMinQLen rows
// and more take the tensor-core kernel (docs/DESIGN.md, "The CUDA backend").
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
  // `multiprocessors`: the device's SM count.
  explicit AttentionPlanner(int multiprocessors);

  // Blocks that fill the chip for the paged kernels.
  int target_ctas() const { return target_ctas_; }
  // The fewest keys a split row's partition gets.
  int min_partition() const { return min_partition_; }
  // Partial (row, head) pairs any step's plan may need on a pool with `n_kv_heads`.
  int64_t scratch_pairs(int n_kv_heads) const;

  // The plan for batch `b`; `tensor_cores`: the tensor-core kernel can take these tensors
  // (head size, strides); `scratch_pairs`: what is allocated.
  StepAttentionPlan plan(const AttentionBatch& b, int n_heads, const KvGeometry& g, DType act,
                         bool tensor_cores, int64_t scratch_pairs);

  // Whether batch `b` takes the long-context decode forms: decode rows alone, at least
  // kLongDecodeMinRows of them, one reading kLongDecodeKeys keys or more. There the paged
  // kernels split the rows into as many partitions as fill decode_target() rather than
  // target_ctas() (at 128k the decode kernel's two blocks a multiprocessor held 8 warps each
  // waiting out its own chunk's loads), and the fused decode forms take a KV head's whole query
  // group in one block (CudaBackend::group_split). Measured on an H100 at 128k (docs/PERF.md,
  // "Long contexts"): bf16 batch 2 -10%, fp8 batch 4 -14%; one row was slower with both (the
  // finer partitions' merge and half the blocks over the same bytes), so it keeps neither.
  static bool long_decode(const AttentionBatch& b);
  static constexpr int32_t kLongDecodeKeys = 16384;
  static constexpr size_t kLongDecodeMinRows = 2;

 private:
  // Blocks of the tensor-core kernel that fill the chip: its occupancy for these types and
  // head size (asked once each) x SMs, at most target_ctas().
  int prefill_target(DType act, const KvGeometry& g);
  // Blocks of the decode kernel that fill the chip in one wave: its occupancy for these types,
  // head size and group (asked once each) x SMs, at most kDecodeMostBlocksPerSm x SMs.
  int decode_target(DType act, const KvGeometry& g, int group);
  static constexpr int kDecodeMostBlocksPerSm = 4;

  int multiprocessors_ = 132;
  int target_ctas_ = 264;
  int min_partition_ = kAttnMinPartition;
  std::vector<std::pair<int, int>> prefill_targets_;  // (head size and types, blocks)
  std::vector<std::pair<int, int>> decode_targets_;   // (head size, types and group, blocks)
};

}  // namespace infercept::cuda
