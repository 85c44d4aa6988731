// The profiler behind `infercept profile` and the engine's start-up: measures the forward
// time T_fwd(x) for x query tokens, what a step costs beyond it (per context token a decode
// row reads, per extra sequence; CostModel::step_seconds) and the KV copy bandwidth between
// the device and host tiers, and derives the saturation point S and the per-step swap budget
// from them. Nothing about the machine is hard-coded: the interception policy reads only what
// this measured. `infercept profile` adds the simulator's step terms and the engine's
// artifacts by direct probes (profile_probes.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/llama.h"
#include "sched/cost_model.h"

namespace infercept {

struct ProfileOptions {
  std::vector<int64_t> token_counts;  // empty = powers of two up to the step budget
  int repeats = 2;                    // best of this many runs per point
  int64_t copy_blocks = 64;           // blocks per bandwidth measurement
};

// Runs forward passes on blocks [0, ...) of `device` (which must be otherwise unused) and
// copies between `device` and `host`.
Result<CostModel> profile_cost_model(StepModel& model, Backend& backend, KvStorage& device,
                                     KvStorage& host, int64_t block_size,
                                     const ProfileOptions& options);

// The disk tier's bandwidths (CostModel::disk_write/read_bytes_per_second): one group of
// `bytes` written through a DiskKvTier in `dir` and read back, as the engine's spills and
// restores run. The write is timed to the end of an fdatasync (what the drive sustains, not
// the page cache's pace), the read after the file's pages were dropped from the cache.
struct DiskBandwidth {
  double write_bytes_per_second = 0.0;
  double read_bytes_per_second = 0.0;
};
Result<DiskBandwidth> measure_disk_bandwidth(const std::string& dir, uint64_t bytes);

// "cpu" or "cuda", with "-tpN" for N tensor-parallel ranks: a group's steps and copies are
// priced apart from one rank's.
std::string profile_backend_label(const std::string& device, int tensor_parallel_size);
// The cache file for a model and backend: next to the model, named after the backend and
// threads, e.g. models/SmolLM2-135M-Instruct.Q4_1.gguf.profile-cpu-2t.json
std::string profile_cache_path(const std::string& model_path, const std::string& backend,
                               int threads);

}  // namespace infercept
