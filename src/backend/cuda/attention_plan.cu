#include "backend/cuda/attention_plan.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/check.h"

namespace infercept::cuda {

AttentionPlanner::AttentionPlanner(int multiprocessors)
    : multiprocessors_(multiprocessors), target_ctas_(2 * multiprocessors) {
  if (const char* c = std::getenv("INFERCEPT_ATTN_CTAS_PER_SM"); c != nullptr)
    target_ctas_ = std::clamp(std::atoi(c), 1, 16) * multiprocessors_;
  if (const char* m = std::getenv("INFERCEPT_ATTN_MIN_PARTITION"); m != nullptr)
    min_partition_ = std::clamp(std::atoi(m) / 32 * 32, 32, 4096);
  if (const char* q = std::getenv("INFERCEPT_PREFILL_MIN_Q"); q != nullptr)
    prefill_min_q_ = std::clamp(std::atoi(q), 2, 1 << 20);
  if (const char* p = std::getenv("INFERCEPT_PREFILL_SPLIT"); p != nullptr && std::string(p) == "0")
    prefill_split_ = false;
  if (const char* b = std::getenv("INFERCEPT_ATTN_BALANCE"); b != nullptr)
    balance_ = std::string(b) == "1";
}

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
      if (n >= prefill_min_q_) n = 0;
  p.paged = plan_attention(b.q_start, rest_q_len, b.ctx_len, n_heads, (int)g.n_kv_heads,
                           target_ctas_, min_partition_, balance_);
  CHECK(p.paged.partial_pairs <= scratch_pairs);
  CHECK((int64_t)p.paged.decode_combines.size() * g.n_kv_heads <= scratch_pairs);
  if (tensor_cores)
    p.prefill = plan_prefill(b.q_start, b.q_len, b.ctx_len, n_heads, prefill_min_q_,
                             prefill_split_ ? prefill_target(act, g) : 0, p.paged.partial_pairs,
                             scratch_pairs);
  return p;
}

}  // namespace infercept::cuda
