// What the engine steps: one LlamaModel on one backend, or a tensor-parallel group of them
// (TensorParallelModel). The engine, the profiler and the step-term probes see only this.
#pragma once

#include <atomic>
#include <cstdint>

#include "backend/backend.h"
#include "io/model_config.h"

namespace infercept {

struct StepInput;

class StepModel {
 public:
  virtual ~StepModel() = default;
  virtual const ModelConfig& config() const = 0;
  // The shapes one backend computes, its KV geometry's heads included (== config() for one
  // model; a rank's share for a tensor-parallel group).
  virtual const ModelConfig& shard_config() const = 0;
  virtual int64_t max_rows() const = 0;
  virtual int64_t max_logit_rows() const = 0;
  // One step over the cache `kv` (a tensor-parallel group: rank 0's; the other ranks use
  // theirs, given at creation). Logits to `logits` [rows, vocab] on the host, or with null
  // left on the backend (last_logits()). With `interrupt` the step may be given up (false).
  virtual bool forward(const StepInput& in, KvStorage& kv, float* logits,
                       const std::atomic<bool>* interrupt = nullptr) = 0;
  virtual Tensor last_logits(int64_t rows) const = 0;
};

}  // namespace infercept
