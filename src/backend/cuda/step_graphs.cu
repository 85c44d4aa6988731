#include "backend/cuda/step_graphs.h"

#include <algorithm>

#include "backend/cuda/cuda_util.h"

namespace infercept::cuda {

StepGraphCache::~StepGraphCache() {
  for (Entry& g : graphs_) cudaGraphExecDestroy(g.exec);
}

cudaGraphExec_t StepGraphCache::find(const LaunchSignature& sig, int64_t step) {
  for (Entry& g : graphs_)
    if (g.sig == sig) {
      g.last_use = step;
      return g.exec;
    }
  return nullptr;
}

bool StepGraphCache::worth_recording(const LaunchSignature& sig) {
  if (seen_.size() > 4096) seen_.clear();
  return ++seen_[sig.hash()] >= 2;
}

cudaGraphExec_t StepGraphCache::add(const LaunchSignature& sig, cudaGraph_t graph, int64_t step,
                                    cudaStream_t stream) {
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  if (graphs_.size() >= kMaxGraphs) {
    auto lru = std::min_element(graphs_.begin(), graphs_.end(), [](const Entry& a, const Entry& b) {
      return a.last_use < b.last_use;
    });
    CUDA_CHECK(cudaStreamSynchronize(stream));  // it may still be running
    CUDA_CHECK(cudaGraphExecDestroy(lru->exec));
    graphs_.erase(lru);
  }
  graphs_.push_back({sig, exec, step});
  seen_.erase(sig.hash());
  return exec;
}

}  // namespace infercept::cuda
