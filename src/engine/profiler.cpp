#include "engine/profiler.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "core/check.h"
#include "kv/block_allocator.h"

namespace infercept {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

std::string profile_cache_path(const std::string& model_path, const std::string& backend,
                               int threads) {
  return model_path + ".profile-" + backend + "-" + std::to_string(threads) + "t.json";
}

Result<CostModel> profile_cost_model(LlamaModel& model, Backend& backend, KvStorage& device,
                                     KvStorage& host, int64_t block_size,
                                     const ProfileOptions& options) {
  const KvGeometry& g = device.geometry();
  std::vector<int64_t> counts = options.token_counts;
  if (counts.empty())
    for (int64_t x = 1; x <= model.max_rows(); x *= 2) counts.push_back(x);
  const int64_t max_tokens = std::min<int64_t>(model.max_rows(), g.n_blocks * block_size);
  CostModel cost;
  const int64_t vocab = model.config().vocab_size;
  std::vector<float> logits((size_t)vocab);
  for (int64_t x : counts) {
    if (x < 1 || x > max_tokens) continue;
    StepInput in;
    const int64_t n_blocks = BlockTable::blocks_for(x, block_size);
    for (int64_t p = 0; p < x; ++p) {
      in.tokens.push_back((int32_t)((p * 7919) % vocab));
      in.positions.push_back((int32_t)p);
      in.slots.push_back((int32_t)p);  // blocks 0.. in order: slot == position
    }
    in.q_start = {0};
    in.q_len = {(int32_t)x};
    in.ctx_len = {(int32_t)x};
    in.max_blocks = (int32_t)n_blocks;
    for (int32_t b = 0; b < (int32_t)n_blocks; ++b) in.block_tables.push_back(b);
    in.logit_rows = {(int32_t)x - 1};
    double best = 1e30;
    model.forward(in, device, logits.data());  // warm-up
    for (int r = 0; r < std::max(1, options.repeats); ++r) {
      const auto t = std::chrono::steady_clock::now();
      model.forward(in, device, logits.data());
      best = std::min(best, seconds_since(t));
    }
    cost.t_fwd_samples.emplace_back(x, best);
  }
  if (cost.t_fwd_samples.empty()) return make_error("profile: no token count fits the model's step size");

  // Copy bandwidth: whole blocks device -> host and back, best of the repeats.
  const int64_t nb = std::min({options.copy_blocks, g.n_blocks, host.geometry().n_blocks});
  std::vector<int32_t> ids((size_t)nb);
  std::iota(ids.begin(), ids.end(), 0);
  double best_out = 1e30, best_in = 1e30;
  backend.copy_blocks_between(device, host, ids, ids);  // warm-up: touch the pages
  for (int r = 0; r < std::max(1, options.repeats); ++r) {
    auto t = std::chrono::steady_clock::now();
    backend.copy_blocks_between(device, host, ids, ids);
    backend.sync();
    best_out = std::min(best_out, seconds_since(t));
    t = std::chrono::steady_clock::now();
    backend.copy_blocks_between(host, device, ids, ids);
    backend.sync();
    best_in = std::min(best_in, seconds_since(t));
  }
  cost.kv_bytes_per_token = (double)g.bytes_per_block_per_layer() * 2.0 * (double)g.n_layers /
                            (double)block_size;
  const double bytes = cost.kv_bytes_per_token * (double)(nb * block_size);
  cost.swap_bytes_per_second = bytes / std::max(best_out, best_in);
  cost.saturation_tokens = cost.derive_saturation();
  TRY(cost.validate());
  return cost;
}

}  // namespace infercept
