// The all-reduce tensor-parallel ranks exchange their partial sums through (model/
// tensor_parallel.h): in-process threads over host memory for CPU backends
// (model/host_communicator.h), NCCL for GPUs (backend/cuda/cuda_backend.h).
#pragma once

#include "backend/tensor.h"

namespace infercept {

class Backend;

// Sums a tensor over all ranks of a group, in place, on every rank (an all-reduce). Every rank
// calls it with a tensor of the same shape in the same order, from the thread that runs its
// backend; on a device it is queued on the backend's stream like any op.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual void all_reduce_sum(Backend& backend, Tensor t) = 0;
};

}  // namespace infercept
