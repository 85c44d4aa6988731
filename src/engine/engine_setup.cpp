// EngineCore's set-up, the steps of create() that build what a step runs on: the backend
// (or one per tensor-parallel rank) and the model, the device and host KV pools, the disk
// tier under them, and the cost model (given, cached next to the model, or measured now).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "core/log.h"
#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "engine/disk_mover.h"
#include "engine/engine.h"
#include "engine/model_group.h"
#include "engine/profile_file.h"
#include "engine/profiler.h"

namespace infercept {

Result<int> cuda_device_index(const std::string& device) {
  if (device == "cuda") return 0;
  if (device.size() < 6 || device.size() > 9 || device.rfind("cuda:", 0) != 0 ||
      device.find_first_not_of("0123456789", 5) != std::string::npos)
    return make_error("bad --device '", device, "' (expected cpu, cuda or cuda:N)");
  return std::stoi(device.substr(5));
}

// `--device`: cpu, cuda or cuda:N.
Result<std::unique_ptr<Backend>> make_backend(const EngineConfig& config) {
  if (config.device == "cpu") {
    CpuBackendOptions o;
    o.n_threads = config.n_threads;
    o.numerics = config.cpu_numerics.value_or(CpuNumerics::fast);
    return make_cpu_backend(o);
  }
  if (config.device.rfind("cuda", 0) == 0) {
    CudaBackendOptions o = config.cuda;
    TRY_ASSIGN(o.device, cuda_device_index(config.device));
    o.graphs = config.cuda_graphs;
    o.activation_dtype = config.compute_dtype;
    return make_cuda_backend(o);
  }
  return make_error("unknown --device '", config.device, "' (expected cpu, cuda or cuda:N)");
}

// The backend and the model on it; with tensor parallelism, a backend and a model per rank
// and the group that steps them (engine/model_group.h), taken apart into rank 0's backend,
// the other ranks' and the group's communicators.
Status EngineCore::create_model() {
  TRY_ASSIGN(ModelGroup g,
             create_model_group(config_, *source_, config_.max_tokens_per_step, config_.max_seqs));
  backend_ = std::move(g.backends[0]);
  for (size_t r = 1; r < g.backends.size(); ++r)
    other_ranks_.push_back({std::move(g.backends[r]), nullptr, nullptr});
  tp_group_ = std::move(g.host_group);
  tp_comms_ = std::move(g.comms);
  tp_model_ = g.group;
  model_ = std::move(g.model);
  return ok_status();
}

// The device KV pool (its size from the flags, or what the GPU has left) and the host pool
// swapped KV goes to, with their allocators (with tensor parallelism, each rank has both, of
// its share of the KV heads, and the allocators count blocks of all ranks at once).
Status EngineCore::create_kv_pools() {
  const EngineConfig& config = config_;
  KvGeometry g = rank_kv_geometry(*model_, config.block_size, config.kv_dtype, 0);
  const size_t block_bytes = g.bytes_per_block_per_layer() * 2 * (size_t)g.n_layers;
  int64_t n_blocks = config.kv_cache_tokens > 0
                         ? BlockTable::blocks_for(config.kv_cache_tokens, config.block_size)
                         : (int64_t)(config.kv_cache_mb * 1024.0 * 1024.0 / (double)block_bytes);
  if (config.gpu_memory_utilization > 0 && !config.kv_cache_size_given) {
    const int64_t total = backend_->total_memory_bytes(), free = backend_->free_memory_bytes();
    if (total < 0)
      return make_error(
          "--gpu-memory-utilization needs a GPU device (use --kv-cache-gb on the CPU)");
    if (config.gpu_memory_utilization > 1.0)
      return make_error("--gpu-memory-utilization must be in (0, 1]");
    // What this process may still take: its share of the card minus what is already used.
    const double budget = (double)total * config.gpu_memory_utilization - (double)(total - free);
    n_blocks = (int64_t)(budget / (double)block_bytes);
    if (n_blocks < 1)
      return make_error("--gpu-memory-utilization ", std::to_string(config.gpu_memory_utilization),
                        " leaves no room for the KV cache after the weights");
  }
  if (n_blocks < 1) return make_error("the KV cache is too small for a single block");
  g.n_blocks = n_blocks;
  allocator_ = std::make_unique<BlockAllocator>((int32_t)n_blocks);
  const int64_t host_blocks = std::max<int64_t>(
      1, config.swap_space_tokens > 0
             ? BlockTable::blocks_for(config.swap_space_tokens, config.block_size)
             : (int64_t)(config.swap_space_mb * 1024.0 * 1024.0 / (double)block_bytes));
  host_allocator_ = std::make_unique<BlockAllocator>((int32_t)host_blocks);
  std::vector<Backend*> ranks{backend_.get()};
  for (OtherRank& r : other_ranks_) ranks.push_back(r.backend.get());
  TRY_ASSIGN(std::vector<RankKv> kv, create_rank_kv(ranks, tp_model_, g, host_blocks));
  kv_ = std::move(kv[0].kv);
  host_kv_ = std::move(kv[0].host);
  for (size_t r = 1; r < kv.size(); ++r) {
    other_ranks_[r - 1].kv = std::move(kv[r].kv);
    other_ranks_[r - 1].host_kv = std::move(kv[r].host);
  }
  return create_disk_tier();
}

// The disk tier under the host pool (--kv-disk-dir, --kv-disk-gb), with the mover that runs
// the scheduler's spills and restores on it.
Status EngineCore::create_disk_tier() {
  const EngineConfig& config = config_;
  if (config.kv_disk_dir.empty()) {
    if (config.kv_disk_gb != 0.0)
      return make_error("--kv-disk-gb needs --kv-disk-dir (the directory of the disk tier)");
    return ok_status();
  }
  if (!(config.kv_disk_gb > 0.0) || !std::isfinite(config.kv_disk_gb))
    return make_error("--kv-disk-gb must be a positive size in GB with --kv-disk-dir (got ",
                      std::to_string(config.kv_disk_gb), ")");
  TRY_ASSIGN(HostBlockPlanes planes, host_block_planes(*host_kv_));
  // A tensor-parallel engine's block is every rank's share of it: the planes of all ranks.
  for (OtherRank& r : other_ranks_) {
    TRY_ASSIGN(HostBlockPlanes more, host_block_planes(*r.host_kv));
    planes.planes.insert(planes.planes.end(), more.planes.begin(), more.planes.end());
  }
  DiskKvTierOptions o;
  o.dir = config.kv_disk_dir;
  o.budget_bytes = (uint64_t)(config.kv_disk_gb * 1e9);
  o.write_fault = config.kv_disk_write_fault;
  TRY_ASSIGN(disk_tier_, DiskKvTier::open(std::move(o)));
  // Blocks the budget holds, a group's header counted per block (the worst case: groups of
  // one block); the tier refuses what does not fit anyway, and the KV then stays on the host.
  disk_blocks_ = (int64_t)(disk_tier_->budget_bytes() / DiskKvTier::file_bytes(planes, 1));
  if (disk_blocks_ < 1)
    return make_error("--kv-disk-gb ", std::to_string(config.kv_disk_gb),
                      " is too small for a single KV block");
  disk_mover_ = std::make_unique<TierDiskMover>(*disk_tier_, std::move(planes), [this] {
    // Queued copies into or out of the host pool end before the I/O thread touches it.
    for_each_rank([](Backend& b, KvStorage&, KvStorage&) {
      if (b.copies_are_async()) b.sync();
    });
  });
  LOG_INFO("disk tier: %s, %.1f GB (%lld blocks)", config.kv_disk_dir.c_str(), config.kv_disk_gb,
           (long long)disk_blocks_);
  return ok_status();
}

// The cost model: given, cached, or measured now (and cached for the next start).
Status EngineCore::load_cost_model() {
  const EngineConfig& config = config_;
  if (config.cost_model) {
    cost_ = *config.cost_model;
  } else {
    const int threads = config.n_threads > 0 ? config.n_threads : default_thread_count();
    const std::string cache =
        config.profile_path.empty()
            ? profile_cache_path(config.model_path,
                                 profile_backend_label(config.device, config.tensor_parallel_size),
                                 threads)
            : config.profile_path;
    auto cached = MappedFile::open(cache);
    std::optional<CostModel> loaded;
    if (cached.ok() && !config.force_profile) {
      auto cm = CostModel::from_json(
          std::string(reinterpret_cast<const char*>((*cached)->data()), (*cached)->size()), cache);
      if (cm.ok())
        loaded = *cm;
      else
        LOG_WARN("ignoring profile %s: %s", cache.c_str(), cm.error().message.c_str());
    }
    if (loaded) {
      cost_ = *loaded;
    } else {
      LOG_INFO("profiling the forward pass and the swap bandwidth (cached in %s)", cache.c_str());
      ProfileOptions po;
      po.token_counts = config.profile_tokens;
      if (po.token_counts.empty())
        for (int64_t x : {1, 16, 64, 128, 256, 512})
          if (x <= config.max_tokens_per_step) po.token_counts.push_back(x);
      // One timed run per point is enough on the CPU, where a step is the same every time and
      // the large ones take seconds. On CUDA the first runs of a step shape are its graph's
      // probe and capture passes, slower than the replays the engine then runs (T_fwd(1)
      // 6.2 ms cached against 4.3 replayed on the H200): best of 3 there. (The swap bandwidth
      // of those caches, one timed copy each way, also read half of what bench-forward
      // measures, 27 against 55 GB/s; whether best of 3 mends that too is still to be seen.)
      po.repeats = config.force_profile || config.device != "cpu" ? 3 : 1;
      TRY_ASSIGN(cost_,
                 profile_cost_model(*model_, *backend_, *kv_, *host_kv_, config.block_size, po));
      if (config.disk_write_bytes_per_second > 0.0 && config.disk_read_bytes_per_second > 0.0) {
        cost_.disk_write_bytes_per_second = config.disk_write_bytes_per_second;
        cost_.disk_read_bytes_per_second = config.disk_read_bytes_per_second;
      }
      // Cache only a complete profile (a tiny test cache cannot measure the large steps).
      const bool complete = cost_.t_fwd_samples.size() == po.token_counts.size();
      std::string text;
      if (config.step_probes) {
        TRY_ASSIGN(ProbeResult probes,
                   probe_step_terms(*model_, *backend_, *kv_, *host_kv_, config.block_size,
                                    config.max_seqs, *config.step_probes, cost_));
        LOG_INFO("step-term probes: %.1f s", probes.seconds);
        ProfileExtras extras;
        extras.artifacts = probes.artifacts;
        extras.copies_overlap = backend_->copies_are_async();
        extras.copy_interference_untouched = probes.copy_interference_untouched;
        extras.max_context = source_->config().max_context;
        text = profile_file_json(cost_, extras);
      } else {
        text = cost_.to_json();
      }
      if (FILE* f = complete ? std::fopen(cache.c_str(), "w") : nullptr) {
        std::fwrite(text.data(), 1, text.size(), f);
        std::fclose(f);
      }
    }
  }
  return ok_status();
}

}  // namespace infercept
