// The all-reduce of ranks that are threads of one process with their tensors in host memory
// (CPU backends): the tensor-parallel model's CPU form, the oracle its device form (NCCL over
// GPUs) is checked against. Every rank sums the same slice of every rank's tensor in rank
// order, so the result is deterministic and bit-identical on all ranks.
#pragma once

#include <barrier>
#include <vector>

#include "model/tensor_parallel.h"

namespace infercept {

// The state the ranks of one group share; make one per group, then one HostCommunicator per
// rank over it.
class HostGroup {
 public:
  explicit HostGroup(int world);
  int world() const { return world_; }

 private:
  friend class HostCommunicator;
  const int world_;
  std::barrier<> barrier_;
  std::vector<float*> buffers_;  // each rank's tensor during a call
  std::vector<float> sum_;       // the sum, filled slice by slice
};

class HostCommunicator final : public Communicator {
 public:
  HostCommunicator(HostGroup& group, int rank);
  int rank() const override { return rank_; }
  int world() const override { return group_.world(); }
  // `t` must be f32 and contiguous (the CPU backend's activations).
  void all_reduce_sum(Backend& backend, Tensor t) override;

 private:
  HostGroup& group_;
  const int rank_;
};

}  // namespace infercept
