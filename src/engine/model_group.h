// The model an EngineConfig names, on the backend(s) it names: one backend and one LlamaModel,
// or with --tensor-parallel-size N a backend a rank (CPU: the threads shared out between the
// ranks; CUDA: a GPU a rank, from the one --device names on), the communicators between them
// (host memory, or NCCL) and the TensorParallelModel that steps them. EngineCore and
// bench-forward build their models through it, so both split a model the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/communicator.h"
#include "core/result.h"
#include "engine/engine.h"
#include "io/tensor_source.h"
#include "model/host_communicator.h"
#include "model/step_model.h"
#include "model/tensor_parallel_model.h"

namespace infercept {

struct ModelGroup {
  // Rank r's backend; backends[0] is the one the caller's own ops (sampling, copies) run on.
  // Declared first: the model and the communicators use them until they are gone.
  std::vector<std::unique_ptr<Backend>> backends;
  std::unique_ptr<HostGroup> host_group;  // the CPU form's meeting point
  std::vector<std::unique_ptr<Communicator>> comms;
  std::unique_ptr<StepModel> model;
  TensorParallelModel* group = nullptr;  // `model`, when it is a tensor-parallel group

  int world() const { return (int)backends.size(); }
  std::vector<Backend*> ranks() const;
};

// max_rows: token rows a step may carry; max_logit_rows: rows whose logits it may ask for.
// An error (never a CHECK) for a size out of [1, 64], a device the ranks cannot all have, or a
// model the ranks cannot split evenly (model/tensor_parallel.h).
Result<ModelGroup> create_model_group(const EngineConfig& config, const ModelSource& source,
                                      int64_t max_rows, int64_t max_logit_rows);

// The geometry of one rank's KV cache of `n_blocks` blocks: the model's layers and head size,
// the rank's share of the KV heads (StepModel::shard_config).
KvGeometry rank_kv_geometry(const StepModel& model, int64_t block_size, DType dtype,
                            int64_t n_blocks);

// Each rank's KV: a device cache of geometry `g` and, with host_blocks > 0, a host pool of
// that many blocks, made on the rank's own device (rank 0's bound again afterwards). A
// tensor-parallel `group` is given ranks 1..'s caches to step over (rank 0's is the caller's).
struct RankKv {
  std::unique_ptr<KvStorage> kv, host;
};
Result<std::vector<RankKv>> create_rank_kv(std::span<Backend* const> ranks,
                                           TensorParallelModel* group, const KvGeometry& g,
                                           int64_t host_blocks);

}  // namespace infercept
