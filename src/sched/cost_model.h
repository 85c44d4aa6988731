// What the interception policy needs to know about the machine, all of it measured by the
// profiler (`infercept profile`) rather than hard-coded: the forward time as a function of
// the query tokens in a step, the KV bytes per token, and the host<->device copy bandwidth.
// From these follow the saturation point S (tokens per step up to which a step costs about
// the same as a decode step) and the swap budget per step (what can be copied while the
// forward pass runs).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"

namespace infercept {

struct CostModel {
  // (query tokens, seconds) samples of one forward step, ascending in tokens; t_fwd()
  // interpolates linearly between them and extrapolates from the last two.
  std::vector<std::pair<int64_t, double>> t_fwd_samples;
  double kv_bytes_per_token = 0.0;      // M: 2 * layers * kv_heads * head_dim * elem bytes
  double swap_bytes_per_second = 0.0;   // B: one direction, host <-> device
  int64_t saturation_tokens = 0;        // S; 0 = derive from the samples

  double t_fwd(int64_t tokens) const;
  // Seconds to copy `tokens` tokens of KV one way.
  double t_swap(int64_t tokens) const;
  // The most tokens whose copy fits in `seconds` (the per-step swap budget N_i).
  int64_t swap_budget_tokens(double seconds) const;
  // S: where T_fwd(x) leaves its flat regime: the largest sampled token count reached while
  // every stretch between samples grows by at most `tolerance` per doubling of x and the
  // total by at most (1 + tolerance)^2. Used when saturation_tokens is 0.
  int64_t derive_saturation(double tolerance = 0.2) const;
  int64_t saturation() const { return saturation_tokens > 0 ? saturation_tokens : derive_saturation(); }

  Status validate() const;
  // JSON text <-> CostModel (the profiler's cache file).
  std::string to_json() const;
  static Result<CostModel> from_json(const std::string& text, const std::string& path);
};

}  // namespace infercept
