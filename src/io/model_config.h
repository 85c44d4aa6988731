// Architecture hyper-parameters of a Llama-family model, read from GGUF metadata or a
// Hugging Face config.json. Everything the forward pass needs to know about shapes lives here.
//
// The architectures the forward pass runs (model/llama.h) differ only in what is listed
// here: Llama 1/2/3.x and Mistral are the plain decoder; Qwen2/Qwen2.5 add a bias to the
// q/k/v projections; Qwen3 adds an RMSNorm over each head of q and k before RoPE (and may
// have head_dim != d_model / n_heads). Any of them may tie the output projection to the
// token embedding. A file field that changes the math beyond this is refused where it is
// read (io/safetensors.cpp, io/gguf.cpp), never ignored.
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
  std::string arch;  // one of supported_architectures() (all Llama-shaped)
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
  bool qk_norm = false;          // Qwen3: RMSNorm (weights [head_dim]) over each q/k head
  // The attention window the file declares (Mistral v0.1: 4096), 0 when there is none. The
  // engine attends to the whole context, which equals the window's attention while a
  // sequence is no longer than the window, so a reader that sees one caps max_context to
  // it (and says so in max_context_note).
  int64_t sliding_window = 0;
  std::string max_context_note;  // why max_context is below the file's own, empty if it is not

  // Checks the numbers are positive and consistent (heads divide, head_dim even) and within
  // sane bounds, so shape products computed from them cannot overflow. The message does not
  // name a file: callers prefix it.
  Status validate() const;

  // Caps max_context to sliding_window when the window is shorter (see sliding_window).
  void apply_sliding_window(int64_t window);
};

// "llama, mistral, qwen2, qwen3": for error messages naming what is supported.
const char* supported_architectures();

}  // namespace infercept
