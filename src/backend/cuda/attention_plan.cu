#include "backend/cuda/attention_plan.h"

#include <algorithm>

#include "core/check.h"

namespace infercept::cuda {

AttentionPlanner::AttentionPlanner(int multiprocessors)
    : multiprocessors_(multiprocessors), target_ctas_(2 * multiprocessors) {}

int64_t AttentionPlanner::scratch_pairs(int n_kv_heads) const {
  // prefill_target() is at most target_ctas_, so this bounds the tensor-core tiles' partials;
  // the paged kernels' targets are at most the larger of target_ctas_ and the decode cap.
  const int paged = std::max(target_ctas_, kDecodeMostBlocksPerSm * multiprocessors_);
  return attention_scratch_pairs(n_kv_heads, paged) + prefill_scratch_pairs(target_ctas_);
}

int AttentionPlanner::decode_target(DType act, const KvGeometry& g, int group) {
  const int key = ((int)g.head_dim * 256 + (int)act * 16 + (int)g.dtype) * 64 + group;
  for (const auto& [k, v] : decode_targets_)
    if (k == key) return v;
  const int per_sm =
      std::min(decode_blocks_per_sm(act, g.dtype, (int)g.head_dim, group), kDecodeMostBlocksPerSm);
  decode_targets_.push_back({key, per_sm * multiprocessors_});
  return decode_targets_.back().second;
}

int AttentionPlanner::prefill_target(DType act, const KvGeometry& g) {
  const int key = (int)g.head_dim * 256 + (int)act * 16 + (int)g.dtype;
  for (const auto& [k, v] : prefill_targets_)
    if (k == key) return v;
  const int v = prefill_blocks_per_sm(act, g.dtype, (int)g.head_dim) * multiprocessors_;
  prefill_targets_.push_back({key, std::min(v, target_ctas_)});
  return prefill_targets_.back().second;
}

bool AttentionPlanner::long_decode(const AttentionBatch& b) {
  if (b.q_len.size() < kLongDecodeMinRows) return false;
  int32_t longest = 0;
  for (size_t i = 0; i < b.q_len.size(); ++i) {
    if (b.q_len[i] != 1) return false;
    longest = std::max(longest, b.ctx_len[i]);
  }
  return longest >= kLongDecodeKeys;
}

StepAttentionPlan AttentionPlanner::plan(const AttentionBatch& b, int n_heads, const KvGeometry& g,
                                         DType act, bool tensor_cores, int64_t scratch_pairs) {
  StepAttentionPlan p;
  std::vector<int32_t> rest_q_len(b.q_len.begin(), b.q_len.end());
  if (tensor_cores)
    for (int32_t& n : rest_q_len)
      if (n >= kPrefillMinQLen) n = 0;
  int paged_target = target_ctas_;
  const int group = n_heads / (int)g.n_kv_heads;
  if (group <= 8 && long_decode(b)) {
    // plan_attention gives a row ceil(target / base) parts: a multiple of the rows' blocks
    // keeps them all in one wave.
    const int cap = decode_target(act, g, group);
    const int base = (int)b.q_len.size() * (int)g.n_kv_heads;
    if (cap > target_ctas_ && base < cap) paged_target = std::max(target_ctas_, cap / base * base);
  }
  p.paged = plan_attention(b.q_start, rest_q_len, b.ctx_len, n_heads, (int)g.n_kv_heads,
                           paged_target, min_partition_);
  CHECK(p.paged.partial_pairs <= scratch_pairs);
  CHECK((int64_t)p.paged.decode_combines.size() * g.n_kv_heads <= scratch_pairs);
  if (tensor_cores)
    p.prefill = plan_prefill(b.q_start, b.q_len, b.ctx_len, n_heads, kPrefillMinQLen,
                             prefill_target(act, g), p.paged.partial_pairs, scratch_pairs);
  return p;
}

}  // namespace infercept::cuda
