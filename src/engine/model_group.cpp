#include "engine/model_group.h"

#include <algorithm>
#include <string>

#include "core/check.h"
#include "core/thread_pool.h"
#include "model/llama.h"

namespace infercept {

Result<ModelGroup> create_model_group(const EngineConfig& config, const ModelSource& source,
                                      int64_t max_rows, int64_t max_logit_rows) {
  const int tp = config.tensor_parallel_size;
  if (tp < 1 || tp > 64)
    return make_error("--tensor-parallel-size must be in [1, 64] (got ", std::to_string(tp), ")");
  ModelGroup g;
  if (tp == 1) {
    TRY_ASSIGN(auto backend, make_backend(config));
    g.backends.push_back(std::move(backend));
    TRY_ASSIGN(g.model, LlamaModel::create(source, *g.backends[0], max_rows, max_logit_rows));
    return g;
  }
  // CPU: the ranks share the cores, each backend its part of the threads, and sum through
  // host memory. CUDA: a GPU a rank from the one --device names on (cuda:N, N+1, ...), NCCL
  // between them; step graphs off (a captured all-reduce per rank is not validated yet).
  const bool cuda = config.device.rfind("cuda", 0) == 0;
  int first_gpu = 0;
  if (cuda) {
    TRY_ASSIGN(first_gpu, cuda_device_index(config.device));
  }
  std::vector<Backend*> backends;
  for (int r = 0; r < tp; ++r) {
    EngineConfig rank_config = config;
    if (cuda) {
      rank_config.device = "cuda:" + std::to_string(first_gpu + r);
      rank_config.cuda_graphs = false;
    } else {
      const int threads = config.n_threads > 0 ? config.n_threads : default_thread_count();
      rank_config.n_threads = std::max(1, threads / tp);
    }
    TRY_ASSIGN(auto backend, make_backend(rank_config));
    backends.push_back(backend.get());
    g.backends.push_back(std::move(backend));
  }
  if (cuda) {
    TRY_ASSIGN(g.comms, make_nccl_communicators(backends));
  } else {
    g.host_group = std::make_unique<HostGroup>(tp);
    for (int r = 0; r < tp; ++r)
      g.comms.push_back(std::make_unique<HostCommunicator>(*g.host_group, r));
  }
  std::vector<Communicator*> comms;
  for (auto& c : g.comms) comms.push_back(c.get());
  TRY_ASSIGN(auto group,
             TensorParallelModel::create(source, backends, comms, max_rows, max_logit_rows));
  g.group = group.get();
  g.model = std::move(group);
  g.backends[0]->bind_thread();  // (create bound each rank in turn; the caller's ops are rank 0's)
  return g;
}

std::vector<Backend*> ModelGroup::ranks() const {
  std::vector<Backend*> out;
  for (const auto& b : backends) out.push_back(b.get());
  return out;
}

KvGeometry rank_kv_geometry(const StepModel& model, int64_t block_size, DType dtype,
                            int64_t n_blocks) {
  const ModelConfig& shard = model.shard_config();
  KvGeometry g;
  g.n_layers = shard.n_layers;
  g.block_size = block_size;
  g.n_kv_heads = shard.n_kv_heads;
  g.head_dim = shard.head_dim;
  g.dtype = dtype;
  g.n_blocks = n_blocks;
  return g;
}

Result<std::vector<RankKv>> create_rank_kv(std::span<Backend* const> ranks,
                                           TensorParallelModel* group, const KvGeometry& g,
                                           int64_t host_blocks) {
  CHECK(!ranks.empty());
  KvGeometry hg = g;
  hg.n_blocks = host_blocks;
  std::vector<RankKv> out;
  for (Backend* rank : ranks) {
    rank->bind_thread();  // (a GPU rank's allocations go to its device)
    RankKv r;
    TRY_ASSIGN(r.kv, rank->create_kv_storage(g));
    if (host_blocks > 0) {
      TRY_ASSIGN(r.host, rank->create_host_kv_storage(hg));
    }
    out.push_back(std::move(r));
  }
  ranks[0]->bind_thread();
  if (group != nullptr) {
    std::vector<KvStorage*> others;
    for (size_t r = 1; r < out.size(); ++r) others.push_back(out[r].kv.get());
    group->set_other_ranks_kv(std::move(others));
  }
  return out;
}

}  // namespace infercept
