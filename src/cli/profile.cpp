// `infercept profile`: measures the forward time T_fwd(x) for x query tokens, the KV copy
// bandwidth between the tiers and, with direct probes on the engine (engine/profile_probes.h),
// every step term the simulator prices (D(n), a(n), p, q, kT, the graph cache, first sight,
// copy interference); derives the saturation point S and the swap budget per step, prints
// the table and caches it next to the model, where the engine finds it at start-up and
// `infercept simulate --profile FILE` reads it.
#include <cstdio>

#include "cli/common.h"
#include "core/thread_pool.h"
#include "engine/profiler.h"
#include "engine/simulator.h"

namespace infercept::cli {

namespace {
void print_series(const char* what, const std::vector<std::pair<int64_t, double>>& s, double scale,
                  const char* unit) {
  std::printf("%s:", what);
  for (const auto& [k, v] : s) std::printf(" %lld: %.4g%s", (long long)k, v * scale, unit);
  std::printf("%s\n", s.empty() ? " (not measured)" : "");
}
}  // namespace

int run_profile(int argc, char** argv) {
  CLI::App app{
      "Measures the forward time T_fwd(x) for x query tokens, the KV copy bandwidth and the "
      "simulator's step terms, prints the cost model and caches it next to the model.",
      "infercept profile"};
  set_up_app(app, "infercept profile --max-tokens-profiled 1024");
  EngineFlags engine_flags;
  int64_t max_x = 2048;
  ProbeOptions probes;
  bool no_probes = false;
  std::string out;
  app.add_option("--max-tokens-profiled", max_x, "largest x of T_fwd(x) measured");
  uint64_t disk_mb = 256;
  app.add_option("--disk-profile-mb", disk_mb,
                 "MiB written and read to measure the disk tier (with --kv-disk-dir)");
  app.add_option("--probe-context", probes.decode_context,
                 "longest context per row of the decode and chunk probes (a(n), p, q)");
  app.add_flag("--no-step-probes", no_probes,
               "T_fwd, the bandwidth and the two quick step terms only (the engine's start-up "
               "profile)");
  app.add_option("--out", out,
                 "write the profile here instead of the cache next to the model (which the "
                 "engine reads at start-up)");
  add_engine_flags(app, engine_flags);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto cfg = engine_config_from(engine_flags);
  if (!cfg.ok()) return fail(cfg.error());
  if (max_x < 1) return fail(make_error("--max-tokens-profiled must be >= 1"));
  if (probes.decode_context < 1) return fail(make_error("--probe-context must be >= 1"));
  probes.chunk_context = probes.decode_context;
  cfg->max_tokens_per_step = std::max<int64_t>(cfg->max_tokens_per_step, max_x);
  cfg->kv_cache_tokens = std::max<int64_t>(cfg->kv_cache_tokens, max_x + 64);
  cfg->force_profile = true;
  if (!out.empty()) cfg->profile_path = out;
  if (!no_probes) cfg->step_probes = probes;
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
  if (no_probes) {
    std::printf(
        "beyond T_fwd: %.4f us per context token read (one decode row), %.1f us per "
        "sequence past the first\n",
        c.context_seconds_per_token(1) * 1e6, c.sequence_seconds * 1e6);
    return 0;
  }
  // What the simulator will read: the file as `simulate --profile` loads it.
  const int threads = cfg->n_threads > 0 ? cfg->n_threads : default_thread_count();
  const std::string path =
      cfg->profile_path.empty()
          ? profile_cache_path(cfg->model_path,
                               profile_backend_label(cfg->device, cfg->tensor_parallel_size),
                               threads)
          : cfg->profile_path;
  auto sim = load_sim_profile(path);
  if (!sim.ok()) return fail(sim.error());
  const CostModel& p = sim->cost;
  const EngineArtifacts& a = sim->artifacts;
  print_series("decode-only step D(n), sequences", p.decode_samples, 1e3, " ms");
  print_series("context a(n), sequences", p.context_samples, 1e6, " us/token");
  print_series("chunk context p(rows), rows", p.chunk_context_samples, 1e6, " us/token");
  std::printf("chunk rows x context q: %.4g ns; chunk step scale kT: %.4f\n",
              p.chunk_row_context_seconds * 1e9, p.chunk_step_scale);
  std::printf("graph cache: %lld entries, a new key %.3f ms, its capture %.3f ms\n",
              (long long)a.graph_cache_entries, a.new_batch_seconds * 1e3,
              a.second_batch_seconds * 1e3);
  std::printf("first sight of a chunk step's row count: %.3f ms\n", a.first_sight_seconds * 1e3);
  std::printf("copy interference: %.3f (in), %.3f (out) s of step per s of copy; copies %s\n",
              a.copy_in_interference, a.copy_out_interference,
              sim->copies_overlap ? "overlap the step" : "stall the step");
  std::printf("written to %s\n", path.c_str());
  return 0;
}

}  // namespace infercept::cli
