// Tensor parallelism, Megatron-style: a model's layers are split over `world` ranks (one GPU
// each, or in tests CPU backends in one process) so that each rank holds 1/world of the
// weights and of the KV cache and computes 1/world of every layer:
//  - column-parallel (split along their outputs): wq, wk, wv (whole heads: rank r holds query
//    heads [r*H/N, (r+1)*H/N) and the KV heads they read, so attention needs no exchange),
//    their biases, w_gate and w_up (a slice of the FFN width);
//  - row-parallel (split along their inputs): wo and w_down. Each rank's product is a partial
//    sum of the full output; one all-reduce per half-layer adds them up before the residual.
//  - replicated: embeddings, norms, Qwen3's per-head q/k norms, the output projection.
// Two all-reduces per layer, of [rows, d_model] activations: that is all the ranks exchange.
// The scheduler, the policies and the block tables are the same on every rank: a block id
// names the same slots of each rank's share of the KV heads.
#pragma once

#include <cstdint>

#include "backend/communicator.h"
#include "backend/tensor.h"
#include "core/result.h"
#include "io/model_config.h"

namespace infercept {

class Backend;

struct TensorParallel {
  int rank = 0;
  int world = 1;
  bool sharded() const { return world > 1; }
};

// Whether `c` splits over `world` ranks: query heads, KV heads and the FFN width divide by it,
// and the row-parallel weights' slices (wo: n_heads / world * head_dim inputs; w_down:
// d_ff / world) fall on whole quantization blocks of `weight_dtype`. The error says which.
Status check_tensor_parallel(const ModelConfig& c, int world, DType weight_dtype);

// What one rank runs: n_heads, n_kv_heads and d_ff divided by `world`; the rest as in `c`.
ModelConfig shard_config(const ModelConfig& c, int world);

}  // namespace infercept
