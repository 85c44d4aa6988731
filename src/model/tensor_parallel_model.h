// One model over several tensor-parallel ranks (model/tensor_parallel.h): a LlamaModel per
// rank, each on its own backend with its own share of the KV cache, stepping together. Rank 0
// runs on the caller's thread and each other rank on a thread of its own that lives as long
// as the model, so a step costs a wake-up per rank, not a thread start. Every rank computes
// the full logits (the output projection is replicated); rank 0's are returned.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "model/llama.h"

namespace infercept {

class TensorParallelModel final : public StepModel {
 public:
  // backends[r] and comms[r] are rank r's (comms[r]->rank() == r, all of one group); they
  // must outlive the model.
  static Result<std::unique_ptr<TensorParallelModel>> create(const ModelSource& src,
                                                             std::span<Backend* const> backends,
                                                             std::span<Communicator* const> comms,
                                                             int64_t max_rows,
                                                             int64_t max_logit_rows);
  ~TensorParallelModel();

  int world() const { return (int)ranks_.size(); }
  const LlamaModel& rank(int r) const { return *ranks_[(size_t)r]; }
  const ModelConfig& config() const override { return ranks_[0]->config(); }
  const ModelConfig& shard_config() const override { return ranks_[0]->shard_config(); }
  int64_t max_rows() const override { return ranks_[0]->max_rows(); }
  int64_t max_logit_rows() const override { return ranks_[0]->max_logit_rows(); }

  // One step on every rank; kv[r] is rank r's cache (geometry from shard_config()).
  void forward(const StepInput& in, std::span<KvStorage* const> kv, float* logits);
  // The caches of ranks 1.. for the StepModel form, which names rank 0's alone.
  void set_other_ranks_kv(std::vector<KvStorage*> kv) { other_kv_ = std::move(kv); }
  // StepModel: rank 0 over `kv`, the others over theirs (set_other_ranks_kv). A step of a
  // group is not interruptible (`interrupt` must be null).
  bool forward(const StepInput& in, KvStorage& kv, float* logits,
               const std::atomic<bool>* interrupt = nullptr) override;
  Tensor last_logits(int64_t rows) const override { return ranks_[0]->last_logits(rows); }

 private:
  TensorParallelModel() = default;
  void worker(int rank);

  std::vector<std::unique_ptr<LlamaModel>> ranks_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;  // steps started
  int pending_ = 0;          // other ranks still running the current step
  bool stop_ = false;
  const StepInput* in_ = nullptr;
  std::span<KvStorage* const> kv_;
  std::vector<KvStorage*> other_kv_, all_kv_;
};

}  // namespace infercept
