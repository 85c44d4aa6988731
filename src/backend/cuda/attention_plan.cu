#include "backend/cuda/attention_plan.h"

#include <algorithm>

#include "core/check.h"

namespace infercept::cuda {

AttentionPlanner::AttentionPlanner(int multiprocessors)
    : multiprocessors_(multiprocessors), target_ctas_(2 * multiprocessors) {}

int64_t AttentionPlanner::scratch_pairs(int n_kv_heads) const {
  // prefill_target() is at most target_ctas_, so this bounds the tensor-core tiles' partials.
  return attention_scratch_pairs(n_kv_heads, target_ctas_) + prefill_scratch_pairs(target_ctas_);
}

int AttentionPlanner::prefill_target(DType act, const KvGeometry& g) {
  const int key = (int)g.head_dim * 256 + (int)act * 16 + (int)g.dtype;
  for (const auto& [k, v] : prefill_targets_)
    if (k == key) return v;
  const int v = prefill_blocks_per_sm(act, g.dtype, (int)g.head_dim) * multiprocessors_;
  prefill_targets_.push_back({key, std::min(v, target_ctas_)});
  return prefill_targets_.back().second;
}

StepAttentionPlan AttentionPlanner::plan(const AttentionBatch& b, int n_heads, const KvGeometry& g,
                                         DType act, bool tensor_cores, int64_t scratch_pairs) {
  StepAttentionPlan p;
  std::vector<int32_t> rest_q_len(b.q_len.begin(), b.q_len.end());
  if (tensor_cores)
    for (int32_t& n : rest_q_len)
      if (n >= kPrefillMinQLen) n = 0;
  p.paged = plan_attention(b.q_start, rest_q_len, b.ctx_len, n_heads, (int)g.n_kv_heads,
                           target_ctas_, min_partition_);
  CHECK(p.paged.partial_pairs <= scratch_pairs);
  CHECK((int64_t)p.paged.decode_combines.size() * g.n_kv_heads <= scratch_pairs);
  if (tensor_cores)
    p.prefill = plan_prefill(b.q_start, b.q_len, b.ctx_len, n_heads, kPrefillMinQLen,
                             prefill_target(act, g), p.paged.partial_pairs, scratch_pairs);
  return p;
}

}  // namespace infercept::cuda
