// Architecture hyper-parameters of a Llama-family model, read from GGUF metadata or a
// Hugging Face config.json. Everything the forward pass needs to know about shapes lives here.
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"

namespace infercept {

// How RoPE pairs the dimensions of a head. GGUF "llama" checkpoints have Q/K rows permuted
// by the converter so that consecutive pairs (2i, 2i+1) rotate together; Hugging Face
// checkpoints (and GGUF qwen2) rotate dimension i with i + head_dim/2 ("neox" style).
enum class RopeStyle { interleaved, neox };

struct RopeScaling {
  // "none" or "llama3". Llama 3.1's frequency-dependent scaling of the inverse frequencies.
  std::string type = "none";
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t original_max_position = 8192;
  // GGUF llama3 checkpoints carry the per-dimension divisors precomputed in a
  // `rope_freqs.weight` tensor [head_dim / 2]; when set, use that tensor instead of
  // computing the factors above.
  bool has_freq_factors_tensor = false;
};

struct ModelConfig {
  std::string arch;  // "llama", "mistral", "qwen2" (all Llama-shaped)
  std::string name;  // human-readable, may be empty
  int64_t n_layers = 0;
  int64_t d_model = 0;     // hidden size
  int64_t n_heads = 0;     // query heads
  int64_t n_kv_heads = 0;  // key/value heads (GQA when < n_heads)
  int64_t head_dim = 0;
  int64_t d_ff = 0;  // SwiGLU intermediate size
  int64_t vocab_size = 0;
  int64_t max_context = 0;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeStyle rope_style = RopeStyle::interleaved;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;  // output projection reuses the token embedding
  bool qkv_bias = false;         // Qwen2 has biases on q/k/v projections

  // Checks the numbers are positive and consistent (heads divide, head_dim even) and within
  // sane bounds, so shape products computed from them cannot overflow. The message does not
  // name a file: callers prefix it.
  Status validate() const;
};

}  // namespace infercept
