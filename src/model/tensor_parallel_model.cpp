#include "model/tensor_parallel_model.h"

#include "core/check.h"

namespace infercept {

Result<std::unique_ptr<TensorParallelModel>> TensorParallelModel::create(
    const ModelSource& src, std::span<Backend* const> backends,
    std::span<Communicator* const> comms, int64_t max_rows, int64_t max_logit_rows) {
  if (backends.empty() || backends.size() != comms.size())
    return make_error("a tensor-parallel model needs one backend and one communicator per rank");
  std::unique_ptr<TensorParallelModel> m(new TensorParallelModel());
  for (size_t r = 0; r < backends.size(); ++r) {
    CHECK(comms[r]->rank() == (int)r && comms[r]->world() == (int)backends.size());
    backends[r]->bind_thread();  // (a GPU's weights go to its device)
    auto rank = LlamaModel::create(src, *backends[r], max_rows, max_logit_rows, comms[r]);
    if (!rank.ok()) return make_error("rank ", std::to_string(r), ": ", rank.error().message);
    m->ranks_.push_back(std::move(*rank));
  }
  for (int r = 1; r < m->world(); ++r) m->threads_.emplace_back([p = m.get(), r] { p->worker(r); });
  return m;
}

TensorParallelModel::~TensorParallelModel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void TensorParallelModel::worker(int rank) {
  ranks_[(size_t)rank]->backend().bind_thread();
  uint64_t seen = 0;
  for (;;) {
    const StepInput* in = nullptr;
    std::span<KvStorage* const> kv;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      in = in_;
      kv = kv_;
    }
    // (Its logits stay on its backend: rank 0's are the ones returned.)
    ranks_[(size_t)rank]->forward(*in, *kv[(size_t)rank], nullptr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

bool TensorParallelModel::forward(const StepInput& in, KvStorage& kv, float* logits,
                                  const std::atomic<bool>* interrupt) {
  CHECK_MSG(interrupt == nullptr, "a tensor-parallel step is not interruptible");
  CHECK_EQ((int)other_kv_.size(), world() - 1);
  all_kv_.clear();
  all_kv_.push_back(&kv);
  all_kv_.insert(all_kv_.end(), other_kv_.begin(), other_kv_.end());
  forward(in, all_kv_, logits);
  return true;
}

void TensorParallelModel::forward(const StepInput& in, std::span<KvStorage* const> kv,
                                  float* logits) {
  CHECK_EQ((int)kv.size(), world());
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_ = &in;
    kv_ = kv;
    pending_ = world() - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  ranks_[0]->backend().bind_thread();
  ranks_[0]->forward(in, *kv[0], logits);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
}

}  // namespace infercept
