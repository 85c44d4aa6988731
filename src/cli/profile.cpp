// `infercept profile`: measures the forward time T_fwd(x) for x query tokens and the KV copy
// bandwidth between the tiers, derives the saturation point S and the swap budget per step,
// prints the table and caches it next to the model, where the engine finds it at start-up.
#include <cstdio>

#include "cli/common.h"
#include "engine/profiler.h"

namespace infercept::cli {

int run_profile(int argc, char** argv) {
  CLI::App app{
      "Measures the forward time T_fwd(x) for x query tokens and the KV copy bandwidth, "
      "prints the cost model and caches it next to the model.",
      "infercept profile"};
  set_up_app(app, "infercept profile --max-tokens-profiled 1024");
  EngineFlags engine_flags;
  int64_t max_x = 2048;
  app.add_option("--max-tokens-profiled", max_x, "largest x of T_fwd(x) measured");
  uint64_t disk_mb = 256;
  app.add_option("--disk-profile-mb", disk_mb,
                 "MiB written and read to measure the disk tier (with --kv-disk-dir)");
  add_engine_flags(app, engine_flags);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto cfg = engine_config_from(engine_flags);
  if (!cfg.ok()) return fail(cfg.error());
  if (max_x < 1) return fail(make_error("--max-tokens-profiled must be >= 1"));
  cfg->max_tokens_per_step = std::max<int64_t>(cfg->max_tokens_per_step, max_x);
  cfg->kv_cache_tokens = std::max<int64_t>(cfg->kv_cache_tokens, max_x + 64);
  cfg->force_profile = true;
  for (int64_t x = 1; x <= max_x; x *= 2) {
    cfg->profile_tokens.push_back(x);
    if (x >= 8 && x * 3 / 2 <= max_x) cfg->profile_tokens.push_back(x * 3 / 2);
  }
  if (!cfg->kv_disk_dir.empty()) {
    // The disk tier's bandwidths, measured before the engine locks the directory.
    auto disk = measure_disk_bandwidth(cfg->kv_disk_dir, disk_mb << 20);
    if (!disk.ok()) return fail(disk.error());
    cfg->disk_write_bytes_per_second = disk->write_bytes_per_second;
    cfg->disk_read_bytes_per_second = disk->read_bytes_per_second;
  }
  auto engine = EngineCore::create(*cfg);
  if (!engine.ok()) return fail(engine.error());
  const CostModel& c = (*engine)->cost_model();
  std::printf("%10s %12s %14s\n", "tokens", "T_fwd (ms)", "per token (us)");
  for (const auto& [x, t] : c.t_fwd_samples)
    std::printf("%10lld %12.2f %14.1f\n", (long long)x, t * 1e3, t * 1e6 / (double)x);
  const int64_t s = c.saturation();
  std::printf(
      "saturation point S: %lld tokens (step time flat: at most +20%% per doubling of tokens, "
      "+44%% in all)\n",
      (long long)s);
  std::printf(
      "beyond T_fwd: %.4f us per context token read (one decode row), %.1f us per "
      "sequence past the first\n",
      c.context_seconds_per_token(1) * 1e6, c.sequence_seconds * 1e6);
  std::printf("KV bytes per token: %.0f\n", c.kv_bytes_per_token);
  std::printf("KV copy bandwidth (each way): %.2f GB/s\n", c.swap_bytes_per_second / 1e9);
  std::printf("disk tier: write %.2f GB/s, read %.2f GB/s (%s)\n",
              c.disk_write_bytes_per_second / 1e9, c.disk_read_bytes_per_second / 1e9,
              cfg->kv_disk_dir.empty() ? "defaults: no --kv-disk-dir" : "measured");
  std::printf(
      "swap budget per step: %lld tokens during a decode step (%.2f ms), %lld during a "
      "step of S tokens\n",
      (long long)c.swap_budget_tokens(c.t_fwd(1)), c.t_fwd(1) * 1e3,
      (long long)c.swap_budget_tokens(c.t_fwd(s)));
  return 0;
}

}  // namespace infercept::cli
