// The Llama-family forward pass (Llama 1/2/3.x, Mistral, SmolLM2, Qwen2/2.5, Qwen3 dense)
// over a paged KV cache, written once against the Backend interface. One call runs one engine
// step: any mix of prefill chunks and decode tokens from many sequences, flattened into rows.
// What differs between the architectures is data in ModelConfig and LayerWeights: q/k/v
// biases (Qwen2) ride on the projections, Qwen3's per-head q/k RMSNorm too
// (Projection::head_norm), tied embeddings make the output projection the embedding.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "io/tensor_source.h"
#include "model/step_model.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace infercept {

// Everything one forward step needs, prepared by the engine on the host.
struct StepInput {
  std::vector<int32_t> tokens;        // [n] query tokens, sequence after sequence
  std::vector<int32_t> positions;     // [n]
  std::vector<int32_t> slots;         // [n] KV slot each token's K/V is written to
  std::vector<int32_t> q_start;       // [n_seqs] first row of each sequence
  std::vector<int32_t> q_len;         // [n_seqs]
  std::vector<int32_t> ctx_len;       // [n_seqs] tokens in the cache after this step
  std::vector<int32_t> block_tables;  // [n_seqs, max_blocks], padded with 0
  int32_t max_blocks = 0;
  std::vector<int32_t> logit_rows;  // rows whose logits are wanted

  void clear();
  int32_t n_seqs() const { return (int32_t)q_start.size(); }
};

class LlamaModel final : public StepModel {
 public:
  // max_rows: most query tokens in one step; max_logit_rows: most sequences sampled per step.
  // With `comm` (tensor parallelism, model/tensor_parallel.h), this is rank comm->rank() of
  // comm->world(): it loads its share of the weights, its KV cache holds its share of the KV
  // heads (shard_config()), and forward() exchanges partial sums through `comm`, so every rank
  // must run every step.
  static Result<std::unique_ptr<LlamaModel>> create(const ModelSource& src, Backend& backend,
                                                    int64_t max_rows, int64_t max_logit_rows,
                                                    Communicator* comm = nullptr);

  const ModelConfig& config() const override { return config_; }
  // The shapes this rank computes (== config() without tensor parallelism): its KV cache's
  // geometry is made from it.
  const ModelConfig& shard_config() const override { return shard_; }
  Backend& backend() const { return backend_; }
  int64_t max_rows() const override { return max_rows_; }
  int64_t max_logit_rows() const override { return max_logit_rows_; }

  // Runs one step and writes logits [in.logit_rows.size(), vocab] to `logits`; with
  // `logits` null they stay on the backend (last_logits()), e.g. for device-side sampling.
  // With `interrupt` (an interruptible backend only), the step is given up between layers,
  // and the backend skips work within one, once `*interrupt` is true: the return is then
  // false and the rows' KV and logits are not to be used (the KV slots are written again
  // when the rows run).
  bool forward(const StepInput& in, KvStorage& kv, float* logits,
               const std::atomic<bool>* interrupt = nullptr) override;
  // The logits of the last step, [rows, vocab] f32, on the backend.
  Tensor last_logits(int64_t rows) const override { return logits_.slice_rows(0, rows); }

 private:
  LlamaModel(Backend& backend, const ModelConfig& c) : backend_(backend), config_(c), shard_(c) {}

  Backend& backend_;
  ModelConfig config_;
  ModelConfig shard_;
  Communicator* comm_ = nullptr;
  ModelWeights weights_;
  int64_t max_rows_ = 0;
  int64_t max_logit_rows_ = 0;
  std::vector<float> freq_factors_;  // [head_dim / 2], empty without rope scaling
  // Activation buffers, allocated once: [max_rows, width].
  Tensor x_, h_, q_, k_, v_, attn_, o_, gate_, up_, logits_in_, logits_;
};

// Per-frequency divisors of RoPE scaling (llama3: long wavelengths slowed by `factor`,
// short ones kept, a smooth band between); empty when the config has no scaling.
std::vector<float> rope_freq_factors(const ModelConfig& c);

}  // namespace infercept
