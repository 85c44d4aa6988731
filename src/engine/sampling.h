// Token sampling: turns one row of logits into the next token id for one request.
//
// Each request owns its Sampler, and the Sampler owns its random generator, so the sequence
// of draws for a request depends only on its seed and its own logits, never on what other
// requests in the same batch do. A non-greedy sample() consumes exactly one 64-bit draw;
// greedy consumes none.
//
// Filter order (the one vLLM and HF use): penalties -> temperature -> top_k -> top_p ->
// min_p -> draw. Greedy (temperature == 0) is argmax with the lowest index on ties and
// never copies or sorts the vocabulary. The non-greedy path copies the row once into a
// scratch buffer kept by the Sampler (no allocation after the first call), computes one
// exp per candidate, and for top_p sorts only the candidates of one log-weight bucket.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"

namespace infercept {

struct SamplingParams {
  float temperature = 1.0f;  // 0 (or < 1e-5) = greedy
  int32_t top_k = 0;         // 0 (or -1, as vLLM clients send) = off
  float top_p = 1.0f;        // (0, 1]; 1 = off
  float min_p = 0.0f;        // [0, 1]; 0 = off; relative to the most likely token
  std::optional<uint64_t> seed;
  // HF/vLLM convention: over prompt + generated tokens (each distinct token once);
  // a positive logit is divided by it, a negative one multiplied. 1 = off.
  float repetition_penalty = 1.0f;
  // OpenAI convention: over generated tokens only. logit -= presence * (count > 0)
  // + frequency * count. Range [-2, 2] as in the OpenAI API.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t max_tokens = 256;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;

  // An error naming the first out-of-range field, e.g. "top_p must be in (0, 1], got 0".
  Status validate() const;

  // Temperatures below 1e-5 (vLLM's epsilon) are treated as greedy: dividing by them
  // would only turn rounding noise into certainty anyway.
  bool is_greedy() const { return temperature < 1e-5f; }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

class Sampler {
 public:
  // `default_seed` is used when params.seed is unset (the engine derives it per request).
  // params must have passed validate().
  Sampler(const SamplingParams& params, uint64_t default_seed);

  // logits: [vocab] for the position being sampled. prompt_tokens / generated_tokens feed
  // the penalties (ids outside [0, vocab) are ignored). Returns an id in [0, vocab).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> prompt_tokens,
                 std::span<const int32_t> generated_tokens);

  const SamplingParams& params() const { return params_; }
  // For a row sampled elsewhere (on the device): the uniform in [0, 1) that sample() would
  // draw for it, consuming the same one draw, so a request's draws stay a function of its
  // seed alone wherever its rows are sampled.
  float draw_uniform();

 private:
  // Fills penalized_ with (id, penalized logit), sorted by id, one entry per distinct id.
  void compute_penalties(std::span<const float> logits, std::span<const int32_t> prompt_tokens,
                         std::span<const int32_t> generated_tokens);
  int32_t greedy(std::span<const float> logits) const;
  template <typename Fn>
  void for_each_logit(std::span<const float> logits, Fn&& fn) const;
  // Uniform in [0, 1) from one 64-bit draw; portable across standard libraries.
  double uniform();

  SamplingParams params_;
  std::mt19937_64 rng_;
  // Scratch, reused across calls.
  std::vector<std::pair<int32_t, float>> penalized_;  // [n distinct penalized ids]
  std::vector<int32_t> ids_scratch_;                  // [n prompt + generated]
  std::vector<std::pair<float, int32_t>> cand_;       // [n candidates] (logit, later weight; id)
  // top_p buckets candidates by d = (best logit - logit) / T: kBinsPerUnit buckets per nat
  // up to kBinRange, one more bucket for everything below (weights < e^-32).
  static constexpr float kBinRange = 32.0f;
  static constexpr float kBinsPerUnit = 16.0f;
  static constexpr uint16_t kBins = 512;             // kBinRange * kBinsPerUnit
  std::vector<uint16_t> bins_;                       // [n candidates] bucket of each candidate
  std::vector<double> bin_mass_;                     // [kBins + 1] weight per bucket
  std::vector<std::pair<float, int32_t>> boundary_;  // candidates of the crossing bucket
};

// Argmax with the lowest index on ties; NaN entries are never chosen (unless all are NaN).
int32_t argmax(std::span<const float> logits);

// log(sum(exp(logits))), computed stably.
float log_sum_exp(std::span<const float> logits);

// log softmax(logits)[id], for OpenAI logprobs.
float log_softmax_at(std::span<const float> logits, int32_t id);

struct TokenLogprob {
  int32_t id;
  float logprob;
};

// The n most likely tokens under softmax(logits), most likely first, lowest id first on ties.
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n);

}  // namespace infercept
