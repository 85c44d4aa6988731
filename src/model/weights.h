// The weights of a Llama-family model, as the backend holds them. Loading maps canonical
// tensor names to typed slots and checks shapes; the bytes are not copied on the CPU.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "io/tensor_source.h"
#include "model/tensor_parallel.h"

namespace infercept {

struct LayerWeights {
  Weight attn_norm;             // [d]
  Weight wq, wk, wv, wo;        // [nh*hd, d], [nkv*hd, d], [nkv*hd, d], [d, nh*hd]
  Weight bq, bk, bv;            // optional biases (Qwen2)
  Weight q_norm, k_norm;        // [hd] per-head RMSNorm of q and k before RoPE (Qwen3), or absent
  Weight ffn_norm;              // [d]
  Weight w_gate, w_up, w_down;  // [f, d], [f, d], [d, f]
};

struct ModelWeights {
  Weight tok_embd;     // [vocab, d]
  Weight output_norm;  // [d]
  Weight output;       // [vocab, d]; the embedding itself when tied
  std::vector<LayerWeights> layers;
  // Vectors stored in another type in the file (bf16 norms of HF checkpoints) are converted
  // to f32 at load; their storage lives here. Inner vectors never move once filled.
  std::vector<std::vector<float>> converted;
  // Column slices of row-parallel weights (tensor parallelism), one rank's copy.
  std::vector<std::vector<uint8_t>> sliced;
};

// With `tp` sharded, the rank's share only (model/tensor_parallel.h says which part of what).
Result<ModelWeights> load_weights(const ModelSource& src, Backend& backend,
                                  const TensorParallel& tp = {});

}  // namespace infercept
