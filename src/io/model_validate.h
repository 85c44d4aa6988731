// Checks that a model source holds every tensor a Llama-shaped forward pass reads, with the
// shapes its ModelConfig implies. Shared by the GGUF and Hugging Face readers so that both
// formats fail the same way (an Error naming the file and the tensor) before any weight is
// touched, instead of a bad checkpoint surfacing as a CHECK in the model code.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.h"
#include "io/tensor_source.h"

namespace infercept {

// The config must already have passed ModelConfig::validate(). Expected shapes (outermost
// first): token_embd {vocab, d}; output_norm {d}; output {vocab, d} if present (required
// unless tied_embeddings); per layer attn_norm/ffn_norm {d}, attn_q {n_heads*head_dim, d},
// attn_k/attn_v {n_kv_heads*head_dim, d}, attn_output {d, n_heads*head_dim}, ffn_gate/ffn_up
// {d_ff, d}, ffn_down {d, d_ff}; with qkv_bias also the q/k/v biases.
Status validate_llama_tensors(const ModelSource& src);

// "[a, b, c]", for messages.
std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace infercept
