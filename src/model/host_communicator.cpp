#include "model/host_communicator.h"

#include <algorithm>

#include "core/check.h"

namespace infercept {

HostGroup::HostGroup(int world) : world_(world), barrier_(world), buffers_((size_t)world, nullptr) {
  CHECK_GE(world, 1);
}

HostCommunicator::HostCommunicator(HostGroup& group, int rank) : group_(group), rank_(rank) {
  CHECK(rank >= 0 && rank < group.world());
}

void HostCommunicator::all_reduce_sum(Backend& backend, Tensor t) {
  (void)backend;  // host memory: nothing to synchronize with
  CHECK_MSG(t.dtype == DType::f32, "the host all-reduce sums f32 tensors");
  CHECK_MSG(t.stride == t.cols || t.rows <= 1, "the host all-reduce needs a contiguous tensor");
  const int64_t n = t.rows * t.cols;
  const int world = group_.world();
  float* mine = static_cast<float*>(t.data);
  if (world == 1) return;
  group_.buffers_[(size_t)rank_] = mine;
  // Rank 0 sizes the shared sum before anyone writes it (between the first two barriers).
  if (rank_ == 0 && (int64_t)group_.sum_.size() < n) group_.sum_.resize((size_t)n);
  group_.barrier_.arrive_and_wait();
  // Each rank sums its slice of the elements over all ranks, in rank order.
  const int64_t per = (n + world - 1) / world;
  const int64_t begin = std::min<int64_t>(n, per * rank_), end = std::min<int64_t>(n, begin + per);
  for (int64_t i = begin; i < end; ++i) {
    float s = group_.buffers_[0][i];
    for (int r = 1; r < world; ++r) s += group_.buffers_[(size_t)r][i];
    group_.sum_[(size_t)i] = s;
  }
  group_.barrier_.arrive_and_wait();
  std::copy(group_.sum_.begin(), group_.sum_.begin() + n, mine);
  // Nobody may start the next call (and overwrite the sum) before all have copied it.
  group_.barrier_.arrive_and_wait();
}

}  // namespace infercept
