// Random-weight Hugging Face checkpoints of real shapes (Llama 2 7B and 13B, Llama 3.1 8B,
// Qwen2.5 7B, Qwen3 8B, Mistral 7B v0.3) and a tiny one of each architecture, for benchmarks
// and tests that need a model of the right size but not its trained weights (`infercept
// make-model`). The directory holds config.json, generation_config.json, tokenizer.json +
// tokenizer_config.json and safetensors shards: what transformers' AutoModelForCausalLM
// (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM) and our own
// HfCheckpoint both load.
//
// Weights come from a counter-based generator: element i of tensor T is a pure function of
// (seed, T's name, i), so the bytes are the same whatever the thread count or shard size.
// Matrices are roughly normal with std 0.02 (o_proj and down_proj scaled by
// 1/sqrt(2 * layers), as GPT-2 initialises residual projections, so activations stay in range
// over depth); norm weights are 1 + N(0, 0.01). Qwen's q/k/v biases are N(0, 0.1) and Qwen3's
// q/k head-norm weights 1 + N(0, 0.1): larger than the rest so that a test comparing logits
// sees clearly whether they were applied, and applied to the right elements.
//
// Tokenizer: the default model's (SmolLM2, byte-level BPE, 49152 tokens) when it fits in the
// shape's vocabulary (embedding rows past it are padding); otherwise a byte-level vocabulary
// cut down from it to fit (its special tokens, the 256 bytes, then its first merges).
// (This lives in the engine library because it needs both io and tokenizer.)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"
#include "io/model_config.h"
#include "io/safetensors_writer.h"
#include "tokenizer/tokenizer.h"

namespace infercept {

struct LlamaShape {
  std::string name;
  std::string arch = "llama";  // llama | mistral | qwen2 | qwen3 (HF model_type)
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  RopeScaling rope_scaling;       // type "none" or "llama3"
  int64_t explicit_head_dim = 0;  // head_dim when not hidden_size / n_heads (Qwen3)
  int64_t sliding_window = 0;     // Mistral's 'sliding_window' (0: null)

  int64_t head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : n_heads > 0 ? hidden_size / n_heads : 0;
  }
};

// llama2-7b, llama2-13b, llama3-8b (Llama 3.1 8B, with its llama3 rope scaling),
// qwen2.5-7b, qwen3-8b, mistral-7b (the configs of Qwen/Qwen2.5-7B-Instruct, Qwen/Qwen3-8B,
// mistralai/Mistral-7B-Instruct-v0.3), tiny (Llama: hidden 256, 4 layers, 8 heads, 4 KV
// heads, ffn 768, vocab 49152, untied embeddings) and qwen2-tiny, qwen3-tiny (head_dim 64),
// mistral-tiny (sliding window 4096 of 8192 positions) of the same size.
const std::vector<LlamaShape>& llama_shapes();
Result<LlamaShape> find_llama_shape(const std::string& name);

enum class CheckpointTokenizer {
  automatic,      // the default model's when it fits in the shape's vocabulary, else byte_level
  default_model,  // the default model's (an error when it does not fit)
  byte_level,     // the cut-down byte-level vocabulary (bytes only without a source model)
};

struct RandomCheckpointOptions {
  LlamaShape shape;
  std::string out_dir;
  uint64_t seed = 0;
  DType dtype = DType::bf16;  // bf16 or f16
  CheckpointTokenizer tokenizer = CheckpointTokenizer::automatic;
  // GGUF whose tokenizer is used (the default model). May be empty only with byte_level,
  // which then has no merges.
  std::string tokenizer_source;
  int64_t max_byte_level_merges = -1;  // byte_level: at most this many merges (-1: all that fit)
  uint64_t max_shard_bytes = 5'000'000'000ull;
  int n_threads = 0;  // 0 = hardware concurrency
  // Progress of the weight files: bytes written, bytes in total, seconds since the start.
  std::function<void(uint64_t, uint64_t, double)> progress;
};

struct RandomCheckpointInfo {
  std::vector<std::string> files;  // every file written
  int64_t n_params = 0;
  uint64_t weight_bytes = 0;
  double weight_seconds = 0.0;  // time to generate and write the weights
  bool default_tokenizer = false;
  int64_t tokenizer_vocab = 0;
  int64_t tokenizer_merges = 0;
};

Result<RandomCheckpointInfo> write_random_checkpoint(const RandomCheckpointOptions& options);

// The pieces, for tests and tools.
// Tensors in file order, with their Hugging Face names.
std::vector<SafetensorsTensor> random_checkpoint_tensors(const LlamaShape& shape, DType dtype);
// Element `i` of tensor `name` before rounding to the file's dtype.
float random_weight_value(uint64_t seed, const LlamaShape& shape, const std::string& name,
                          int64_t i);
// config.json text, as transformers writes it for the shape's model_type.
std::string hf_config_json(const LlamaShape& shape, DType dtype, const TokenizerSpec& tok);
// The tokenizer the options ask for (the source GGUF's, or the byte-level cut of it).
Result<TokenizerSpec> random_checkpoint_tokenizer(const RandomCheckpointOptions& options);

}  // namespace infercept
