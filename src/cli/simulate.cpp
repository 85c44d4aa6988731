// `infercept simulate`: `infercept bench` without a model. The same workloads (Table 1
// generator or a trace file), the real scheduler, policies and estimators, driven in virtual
// time by a cost model (src/engine/simulator.h): an hour of traffic in seconds, settings no
// machine here has (an H200, several of them, thousands of concurrent agents). Prints the
// same metrics table and JSON as bench, plus waste by cause and what the run cost to simulate.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "cli/common.h"
#include "cli/workload_options.h"
#include "engine/simulator.h"
#include "sched/scheduler.h"
#include "workload/metrics.h"
#include "workload/trace.h"
#include "workload/workload.h"

namespace infercept::cli {

namespace {

struct SimulateFlags {
  WorkloadFlags workload;
  SimConfig sim;  // bound where the units match; the rest below
  std::string profile = "h200-llama2-7b", json_path, copy_mode;
  int64_t gpus = 1, graph_cache = 0, jitter_seed = 1, model_context = 0;
  double tp_efficiency = 0.0, context_cost_us = 0.0, sequence_cost_us = 0.0, sample_cost_us = 0.0,
         first_sight_ms = 0.0, gpu_memory_utilization = 0.9;
  double kv_cache_gb = 0.0, kv_cache_mb = 0.0, swap_space_gb = 0.0, swap_space_mb = 0.0;
  int64_t kv_cache_tokens = 0, swap_space_tokens = 0;
  std::string kv_disk_dir;  // the disk tier's switch (the simulator writes no file there)
  double kv_disk_gb = 0.0;
  std::string graph_miss_ms, prefix_cache = "on";
  bool quiet = false, no_hints = false;
  CLI::Option *tp_efficiency_opt = nullptr, *copy_mode_opt = nullptr, *model_context_opt = nullptr,
              *context_cost_opt = nullptr, *sequence_cost_opt = nullptr, *sample_cost_opt = nullptr,
              *graph_cache_opt = nullptr, *graph_miss_opt = nullptr, *first_sight_opt = nullptr,
              *shared_prefix_opt = nullptr;
  CLI::Option *kv_tokens_opt = nullptr, *kv_gb_opt = nullptr, *kv_mb_opt = nullptr,
              *swap_tokens_opt = nullptr, *swap_gb_opt = nullptr, *swap_mb_opt = nullptr;
};

void add_simulate_flags(CLI::App& app, SimulateFlags& f) {
  SimConfig& c = f.sim;
  const std::string m = "Machine", e = "Engine";
  app.add_option("--json", f.json_path, "also write the results as JSON to this file");
  app.add_option("--step-trace", c.step_trace_path, "write one CSV row per step to this file");
  app.add_flag("--quiet", f.quiet, "print no table");
  app.add_flag("--check-invariants", c.check_invariants,
               "check the scheduler's invariants after every step");
  app.add_option("--profile", f.profile,
                 "a built-in profile (h200-llama2-7b, h200-llama3-8b, h200-llama2-13b) or an "
                 "`infercept profile` cache")
      ->group(m);
  app.add_option("--gpus", f.gpus, "tensor-parallel GPUs")->check(CLI::Range(1, 1024))->group(m);
  f.tp_efficiency_opt = app.add_option("--tp-efficiency", f.tp_efficiency,
                                       "tensor-parallel efficiency in (0, 1] (default: "
                                       "0.9^log2(gpus))")
                            ->default_str("")
                            ->group(m);
  f.copy_mode_opt = app.add_option("--copy-mode", f.copy_mode,
                                   "overlap|stall: whether KV copies overlap the step "
                                   "(default: the profile's)")
                        ->check(CLI::IsMember({"overlap", "stall"}))
                        ->group(m);
  f.model_context_opt =
      app.add_option("--model-context", f.model_context,
                     "the model's context limit (default: the profile's; 0: none)")
          ->default_str("")
          ->group(m);
  f.context_cost_opt = app.add_option("--context-cost-us", f.context_cost_us,
                                      "us per context token, one constant (0: none; default: "
                                      "the profile's samples)")
                           ->default_str("")
                           ->group(m);
  f.sequence_cost_opt = app.add_option("--sequence-cost-us", f.sequence_cost_us,
                                       "us per sequence past the first (default: the profile's)")
                            ->default_str("")
                            ->group(m);
  f.sample_cost_opt = app.add_option("--sample-cost-us", f.sample_cost_us,
                                     "us per sampled row (default: the profile's)")
                          ->default_str("")
                          ->group(m);
  f.graph_cache_opt = app.add_option("--graph-cache", f.graph_cache,
                                     "graphs in the engine's graph cache (0: the batch-change "
                                     "rule; default: the profile's)")
                          ->check(CLI::Range(0, 100000))
                          ->default_str("")
                          ->group(m);
  f.graph_miss_opt = app.add_option("--graph-miss-ms", f.graph_miss_ms,
                                    "NEW,SECOND: ms a step with a new batch shape costs, and "
                                    "its second sight (default: the profile's)")
                         ->group(m);
  f.first_sight_opt = app.add_option("--first-sight-ms", f.first_sight_ms,
                                     "ms a chunk row count seen for the first time costs "
                                     "(default: the profile's)")
                          ->check(CLI::Range(0.0, 1000.0))
                          ->default_str("")
                          ->group(m);
  app.add_option("--step-jitter", c.step_jitter, "log-normal sigma of step-time noise")
      ->check(CLI::Range(0.0, 1.0))
      ->group(m);
  app.add_option("--jitter-seed", f.jitter_seed, "seed of the step-time noise")
      ->check(CLI::NonNegativeNumber)
      ->group(m);
  app.add_option("--gpu-memory-utilization", f.gpu_memory_utilization,
                 "share of GPU memory for weights and KV (built-in profiles' KV size)")
      ->group(m);
  app.add_option("--policy", c.policy,
                 "paused KV: discard|improved-discard|preserve|swap|ttl|minwaste")
      ->group(e);
  app.add_option("--estimator", c.estimator, "tool durations: oracle|elapsed|learned")->group(e);
  app.add_flag("--no-hints", f.no_hints, "give the estimator no tool-duration hints")->group(e);
  app.add_option("--interception-timeout", c.interception_timeout_s,
                 "seconds a request may stay paused before its KV is released")
      ->group(e);
  app.add_option("--idle-tick", c.idle_tick_s, "engine wake-up while only paused requests exist")
      ->group(e);
  app.add_option("--prefix-cache", f.prefix_cache,
                 "keep full KV blocks indexed by their prefix for later requests, as the engine")
      ->check(CLI::IsMember({"on", "off"}))
      ->group(e);
  f.shared_prefix_opt =
      app.add_option("--shared-prefix", c.shared_prefix_tokens,
                     "tokens of one system prompt in front of every drawn prompt (bench "
                     "--shared-prefix; default: the workload's, sessions: its system prompt "
                     "and tools; else 0)")
          ->check(CLI::Range((int64_t)0, (int64_t)1 << 20))
          ->group(e);
  app.add_option("--block-size", c.block_size, "tokens per KV block")->group(e);
  app.add_option("--max-batch-tokens", c.max_tokens_per_step, "tokens per step")->group(e);
  app.add_option("--max-seqs", c.max_seqs, "sequences per step")->group(e);
  app.add_option("--max-partial-prefills", c.max_partial_prefills,
                 "unfinished prefills sharing a step (1: FCFS)")
      ->group(e);
  app.add_option("--long-prefill-tokens", c.long_prefill_tokens,
                 "chunk of a long prefill sharing a step (0: automatic)")
      ->group(e);
  const std::string kv_default = "(default: what the profile's device holds, else 256 MiB)";
  f.kv_tokens_opt =
      app.add_option("--kv-cache-tokens", f.kv_cache_tokens, "KV cache in tokens " + kv_default)
          ->default_str("")
          ->group(e);
  f.kv_gb_opt = app.add_option("--kv-cache-gb", f.kv_cache_gb, "KV cache in GiB of the shape's KV")
                    ->default_str("")
                    ->group(e);
  f.kv_mb_opt = app.add_option("--kv-cache-mb", f.kv_cache_mb, "KV cache in MiB of the shape's KV")
                    ->default_str("")
                    ->group(e);
  const std::string swap_default = "(default: 64 GiB per GPU of a built-in profile, else 256 MiB)";
  f.swap_tokens_opt = app.add_option("--swap-space-tokens", f.swap_space_tokens,
                                     "host pool in tokens " + swap_default)
                          ->default_str("")
                          ->group(e);
  f.swap_gb_opt = app.add_option("--swap-space-gb", f.swap_space_gb, "host pool in GiB")
                      ->default_str("")
                      ->group(e);
  f.swap_mb_opt = app.add_option("--swap-space-mb", f.swap_space_mb, "host pool in MiB")
                      ->default_str("")
                      ->group(e);
  app.add_option("--kv-disk-dir", f.kv_disk_dir,
                 "simulate a disk tier below the host pool (no file is written; its disk "
                 "bandwidths are the profile's)")
      ->group(e);
  app.add_option("--kv-disk-gb", f.kv_disk_gb, "size of the disk tier in GB (with --kv-disk-dir)")
      ->group(e);
  add_workload_flags(app, f.workload);
}

// The cost model of `gpus` devices: the profile's, with the step terms the flags override
// (us per device as the profile gives them; --context-cost-us makes the context term one
// constant, 0 removes it).
Result<CostModel> cost_model_from(const SimulateFlags& f, const SimProfile& profile, double eff) {
  CostModel one = profile.cost;
  for (const auto& [opt, us, seconds] :
       {std::tuple{f.context_cost_opt, f.context_cost_us, (double*)nullptr},
        std::tuple{f.sequence_cost_opt, f.sequence_cost_us, &one.sequence_seconds},
        std::tuple{f.sample_cost_opt, f.sample_cost_us, &one.sample_seconds_per_row}}) {
    if (!given(opt)) continue;
    if (!(us >= 0.0)) return make_error(opt->get_name(), " must be >= 0");
    if (seconds != nullptr) *seconds = us * 1e-6;
  }
  if (given(f.context_cost_opt) && f.context_cost_us == 0.0) one.context_samples.clear();
  if (given(f.context_cost_opt) && f.context_cost_us > 0.0)
    one.context_samples = {{1, f.context_cost_us * 1e-6}};
  return scale_cost_model(one, (int)f.gpus, eff);
}

// The engine's artifacts: the profile's, or the flags' (0 turns them off).
Result<EngineArtifacts> artifacts_from(const SimulateFlags& f, const SimProfile& profile) {
  EngineArtifacts a = profile.artifacts;
  if (given(f.graph_cache_opt)) a.graph_cache_entries = f.graph_cache;
  if (given(f.graph_miss_opt)) {
    // NEW,SECOND in ms (EngineArtifacts::new_batch_seconds, second_batch_seconds).
    const std::string& v = f.graph_miss_ms;
    const size_t comma = v.find(',');
    char* end1 = nullptr;
    char* end2 = nullptr;
    const double first = comma == std::string::npos ? -1.0 : std::strtod(v.c_str(), &end1);
    const double second =
        comma == std::string::npos ? -1.0 : std::strtod(v.c_str() + comma + 1, &end2);
    if (comma == std::string::npos || end1 != v.c_str() + comma || end2 == nullptr || *end2 != 0 ||
        !(first >= 0.0) || !(second >= 0.0) || first > 1000.0 || second > 1000.0)
      return make_error("--graph-miss-ms wants two milliseconds NEW,SECOND (each 0-1000), got '", v,
                        "'");
    a.new_batch_seconds = first * 1e-3;
    a.second_batch_seconds = second * 1e-3;
  }
  if (given(f.first_sight_opt)) a.first_sight_seconds = f.first_sight_ms * 1e-3;
  return a;
}

// KV pools: explicit tokens, else GiB or MiB of the shape's KV bytes per token, else what the
// profile's device would give (built-in profiles), else bench's defaults (256 MiB each).
struct Pools {
  int64_t kv_tokens = 0, swap_tokens = 0;
};
Result<Pools> pools_from(const SimulateFlags& f, const SimProfile& profile, double kv_bytes) {
  auto pool = [&](const CLI::Option* tokens_opt, int64_t tokens, const CLI::Option* gb_opt,
                  double gb, const CLI::Option* mb_opt, double mb, int64_t fallback) {
    if (given(tokens_opt)) return tokens;
    if (given(gb_opt)) return (int64_t)(gb * 1024.0 * 1024.0 * 1024.0 / kv_bytes);
    if (given(mb_opt)) return (int64_t)(mb * 1024.0 * 1024.0 / kv_bytes);
    return fallback;
  };
  const int64_t bench_default = (int64_t)(256.0 * 1024.0 * 1024.0 / kv_bytes);
  int64_t kv_default = profile.default_kv_cache_tokens((int)f.gpus, f.gpu_memory_utilization);
  if (kv_default <= 0) kv_default = bench_default;
  // Host memory of the H200 machines: 128 GiB for one GPU, 560 for eight; 64 GiB per GPU.
  const int64_t swap_default =
      profile.device_memory_gib > 0.0
          ? (int64_t)(64.0 * (double)f.gpus * 1024.0 * 1024.0 * 1024.0 / kv_bytes)
          : bench_default;
  Pools p;
  p.kv_tokens = pool(f.kv_tokens_opt, f.kv_cache_tokens, f.kv_gb_opt, f.kv_cache_gb, f.kv_mb_opt,
                     f.kv_cache_mb, kv_default);
  p.swap_tokens = pool(f.swap_tokens_opt, f.swap_space_tokens, f.swap_gb_opt, f.swap_space_gb,
                       f.swap_mb_opt, f.swap_space_mb, swap_default);
  if (p.kv_tokens <= 0 || p.swap_tokens < 0)
    return make_error("the KV cache must be > 0 tokens, swap space >= 0");
  return p;
}

// The simulated deployment: the machine (profile, GPUs, cost model, artifacts, noise) and the
// engine's sizes, checked.
struct Deployment {
  SimProfile profile;
  SimConfig cfg;
  int64_t gpus = 1;
  double eff = 1.0;
  std::string copy_mode;
};
Result<Deployment> deployment_from(const SimulateFlags& f) {
  Deployment d;
  TRY_ASSIGN(d.profile, load_sim_profile(f.profile));
  d.gpus = f.gpus;
  d.eff = given(f.tp_efficiency_opt) ? f.tp_efficiency : default_tp_efficiency((int)f.gpus);
  if (!(d.eff > 0.0 && d.eff <= 1.0)) return make_error("--tp-efficiency must be in (0, 1]");
  SimConfig& cfg = d.cfg;
  cfg = f.sim;
  TRY_ASSIGN(cfg.cost, cost_model_from(f, d.profile, d.eff));
  d.copy_mode =
      given(f.copy_mode_opt) ? f.copy_mode : (d.profile.copies_overlap ? "overlap" : "stall");
  cfg.copies_overlap = d.copy_mode == "overlap";
  TRY_ASSIGN(cfg.artifacts, artifacts_from(f, d.profile));
  cfg.jitter_seed = (uint64_t)f.jitter_seed;
  cfg.hints = !f.no_hints;
  cfg.prefix_cache = f.prefix_cache == "on";
  cfg.max_context = given(f.model_context_opt) ? f.model_context : d.profile.max_context;
  if (cfg.max_partial_prefills < 1 || cfg.long_prefill_tokens < 0)
    return make_error("--max-partial-prefills must be >= 1, --long-prefill-tokens >= 0");
  if (cfg.block_size <= 0 || cfg.max_tokens_per_step <= 0 || cfg.max_seqs <= 0 ||
      cfg.max_context < 0)
    return make_error(
        "--block-size, --max-batch-tokens and --max-seqs must be > 0, --model-context >= 0");
  if (!(cfg.interception_timeout_s > 0.0) || !(cfg.idle_tick_s > 0.0))
    return make_error("--interception-timeout and --idle-tick must be > 0");
  TRY_ASSIGN(Pools pools, pools_from(f, d.profile, cfg.cost.kv_bytes_per_token));
  cfg.kv_cache_tokens = pools.kv_tokens;
  cfg.swap_space_tokens = pools.swap_tokens;
  if (!f.kv_disk_dir.empty() && !(f.kv_disk_gb > 0.0))
    return make_error("--kv-disk-dir needs --kv-disk-gb N with N > 0 (the disk tier's size)");
  if (f.kv_disk_dir.empty() && f.kv_disk_gb != 0.0)
    return make_error("--kv-disk-gb needs --kv-disk-dir (the directory of the disk tier)");
  if (!f.kv_disk_dir.empty())
    cfg.disk_tokens = (int64_t)(f.kv_disk_gb * 1e9 / cfg.cost.kv_bytes_per_token);
  return d;
}

double arrival_rate(const WorkloadRun& run) {
  return run.trace.empty() ? 0.0 : (double)run.trace.size() / run.duration_s;
}

// What was simulated: the machine, its cost model and the engine's sizes.
void print_deployment(const Deployment& d, const SimResult& r) {
  const SimProfile& profile = d.profile;
  const SimConfig& cfg = d.cfg;
  const double gb = 1e9, m = cfg.cost.kv_bytes_per_token;
  std::printf("SIMULATED: profile %s (%s), %lld GPU(s) at TP efficiency %.2f, copies %s\n",
              profile.name.c_str(), profile.source.c_str(), (long long)d.gpus,
              d.gpus > 1 ? d.eff : 1.0, d.copy_mode.c_str());
  std::printf(
      "T_fwd(1) %.2f ms, T_fwd(%lld) %.2f ms, S %lld, context %.3f us/token (1 sequence) "
      "%.3f (%lld), "
      "sequence %.1f us, sampled row %.1f us, KV %.0f bytes/token, copy %.1f GB/s each way\n",
      cfg.cost.t_fwd(1) * 1e3, (long long)cfg.max_tokens_per_step,
      cfg.cost.t_fwd(cfg.max_tokens_per_step) * 1e3, (long long)cfg.cost.saturation(),
      cfg.cost.context_seconds_per_token(1) * 1e6,
      cfg.cost.context_seconds_per_token(cfg.max_seqs) * 1e6, (long long)cfg.max_seqs,
      cfg.cost.sequence_seconds * 1e6, cfg.cost.sample_seconds_per_row * 1e6, m,
      cfg.cost.swap_bytes_per_second / gb);
  if (!cfg.cost.decode_samples.empty() || !cfg.cost.chunk_context_samples.empty() ||
      cfg.cost.chunk_row_context_seconds > 0.0) {
    if (cfg.cost.decode_samples.empty())
      std::printf("decode-only steps at T_fwd(n);");
    else
      std::printf("decode-only step D(1) %.2f ms, D(%lld) %.2f ms;", cfg.cost.t_decode(1) * 1e3,
                  (long long)cfg.max_seqs, cfg.cost.t_decode(cfg.max_seqs) * 1e3);
    std::printf(" prefill chunks per context token:");
    if (cfg.cost.chunk_context_samples.empty()) std::printf(" as decode rows");
    for (const auto& [rows, sec] : cfg.cost.chunk_context_samples)
      std::printf(" %.3f us from %lld rows", sec * 1e6, (long long)rows);
    if (cfg.cost.chunk_row_context_seconds > 0.0)
      std::printf(", plus %.3f ns per chunk row", cfg.cost.chunk_row_context_seconds * 1e9);
    std::printf("\n");
  }
  std::printf(
      "KV cache %lld tokens (%.1f GiB), swap space %lld tokens (%.1f GiB), "
      "%lld tokens and %lld sequences per step, long-prefill chunk %lld\n",
      (long long)r.kv_cache_tokens, (double)r.kv_cache_tokens * m / (1 << 30),
      (long long)r.swap_space_tokens, (double)r.swap_space_tokens * m / (1 << 30),
      (long long)cfg.max_tokens_per_step, (long long)cfg.max_seqs,
      (long long)(cfg.long_prefill_tokens > 0
                      ? cfg.long_prefill_tokens
                      : automatic_long_prefill_chunk(&cfg.cost, cfg.max_tokens_per_step,
                                                     SchedulerConfig{}.min_long_prefill_chunk)));
}

// What happened: the metrics table, the policy's decisions, waste, the engine's work.
void print_run(const Deployment& d, const WorkloadRun& run, const SimResult& r) {
  const SimConfig& cfg = d.cfg;
  const SimStats& st = r.stats;
  const Summary sum = summarize(r.records, run.duration_s);
  const double gb = 1e9, rate = arrival_rate(run), duration = run.duration_s;
  const std::string& wl = run.name;
  std::printf(
      "workload %s, policy %s, estimator %s, rate %.2f req/s, %.0f s of arrivals "
      "(%.0f s simulated)\n",
      wl.c_str(), cfg.policy.c_str(), cfg.estimator.c_str(), rate, duration, r.end_time_s);
  std::printf("%s",
              format_summary_table(sum, summarize_by_augmentation(r.records, duration)).c_str());
  std::printf(
      "interceptions %lld, recomputed tokens %lld, swapped out/in %lld/%lld tokens, "
      "preemptions %lld (%lld by swapping), skipped %lld\n",
      (long long)st.interceptions, (long long)st.recomputed_tokens,
      (long long)st.swapped_out_tokens, (long long)st.swapped_in_tokens, (long long)st.preemptions,
      (long long)st.swap_preemptions, (long long)r.skipped);
  std::printf("decisions discard/swap/preserve %lld/%lld/%lld\n", (long long)st.discard_decisions,
              (long long)st.swap_decisions, (long long)st.preserve_decisions);
  std::printf("waste (GB*s): recompute %.3f, preserve %.3f, swap stall %.3f\n",
              st.waste_recompute / gb, st.waste_preserve / gb, st.waste_swap_stall / gb);
  if (cfg.disk_tokens > 0) print_disk_tier(st);
  std::printf("%s", format_resume_ttft(r.resume_ttft).c_str());
  if (cfg.prefix_cache)
    std::printf(
        "prefix cache: hit %.1f%% of %lld prompt tokens looked up; evicted/demoted/promoted "
        "%lld/%lld/%lld blocks\n",
        100.0 * st.prefix_hit_rate(), (long long)st.prefix_query_tokens,
        (long long)st.prefix_evicted_blocks, (long long)st.prefix_demoted_blocks,
        (long long)st.prefix_promoted_blocks);
  std::printf(
      "engine: %lld steps (%lld decode-only), busy %.1f%% of %.0f s, forward %.1f s, swap stall "
      "%.2f s, "
      "peak running/paused/waiting %lld/%lld/%lld, peak KV blocks device %lld host %lld\n",
      (long long)st.steps, (long long)st.decode_only_steps,
      r.end_time_s > 0 ? 100.0 * st.busy_seconds / r.end_time_s : 0.0, r.end_time_s,
      st.forward_seconds, st.swap_stall_seconds, (long long)st.max_running,
      (long long)st.max_paused, (long long)st.max_waiting, (long long)st.peak_device_blocks,
      (long long)st.peak_host_blocks);
  for (const ToolStats& ts : r.tools)
    std::printf("tool %-16s n=%-6lld p50 %.3fs p95 %.3fs p99 %.3fs\n", ts.tool.c_str(),
                (long long)ts.count, ts.p50, ts.p95, ts.p99);
  std::printf("simulated %.0f s in %.2f s of wall time (%.0fx)\n", r.end_time_s, r.wall_seconds,
              r.wall_seconds > 0 ? r.end_time_s / r.wall_seconds : 0.0);
}

nlohmann::json results_json(const Deployment& d, const WorkloadRun& run, const SimResult& r) {
  const SimProfile& profile = d.profile;
  const SimConfig& cfg = d.cfg;
  const SimStats& st = r.stats;
  const Summary sum = summarize(r.records, run.duration_s);
  const double rate = arrival_rate(run), duration = run.duration_s;
  const std::string& wl = run.name;
  nlohmann::json j;
  j["simulated"] = true;
  j["profile"] = profile.name;
  j["gpus"] = d.gpus;
  j["tp_efficiency"] = d.gpus > 1 ? d.eff : 1.0;
  j["copy_mode"] = d.copy_mode;
  j["context_seconds_per_token"] = cfg.cost.context_samples;
  j["sequence_seconds"] = cfg.cost.sequence_seconds;
  j["sample_seconds_per_row"] = cfg.cost.sample_seconds_per_row;
  j["decode_seconds"] = cfg.cost.decode_samples;
  j["chunk_context_seconds_per_token"] = cfg.cost.chunk_context_samples;
  j["chunk_row_context_seconds"] = cfg.cost.chunk_row_context_seconds;
  j["kv_cache_tokens"] = r.kv_cache_tokens;
  j["swap_space_tokens"] = r.swap_space_tokens;
  j["max_batch_tokens"] = cfg.max_tokens_per_step;
  j["max_seqs"] = cfg.max_seqs;
  j["workload"] = wl;
  j["policy"] = cfg.policy;
  j["estimator"] = cfg.estimator;
  j["rate"] = rate;
  j["duration_s"] = duration;
  j["summary"] = to_json(sum);
  j["interceptions"] = st.interceptions;
  j["recomputed_tokens"] = st.recomputed_tokens;
  j["swapped_out_tokens"] = st.swapped_out_tokens;
  j["swapped_in_tokens"] = st.swapped_in_tokens;
  j["preemptions"] = st.preemptions;
  j["swap_preemptions"] = st.swap_preemptions;
  j["skipped"] = r.skipped;
  j["waste_byte_seconds"] = {{"recompute", st.waste_recompute},
                             {"preserve", st.waste_preserve},
                             {"swap_stall", st.waste_swap_stall}};
  j["prefix_cache"] = prefix_cache_json(st, cfg.prefix_cache, cfg.shared_prefix_tokens);
  j["disk_tier"] = disk_tier_json(st, cfg.disk_tokens > 0);
  j["resume_ttft_s"] = resume_ttft_json(r.resume_ttft);
  j["decisions"] = {{"discard", st.discard_decisions},
                    {"swap", st.swap_decisions},
                    {"preserve", st.preserve_decisions},
                    {"prefetch", st.prefetches}};
  nlohmann::json tools = nlohmann::json::array();
  for (const ToolStats& ts : r.tools)
    tools.push_back({{"tool", ts.tool},
                     {"count", ts.count},
                     {"p50", ts.p50},
                     {"p95", ts.p95},
                     {"p99", ts.p99}});
  j["tools"] = tools;
  nlohmann::json by_aug = nlohmann::json::object();
  for (const auto& [name, s] : summarize_by_augmentation(r.records, duration))
    by_aug[name] = to_json(s);
  j["by_augmentation"] = by_aug;
  j["engine"] = {{"steps", st.steps},
                 {"decode_only_steps", st.decode_only_steps},
                 {"decode_only_s", st.decode_only_seconds},
                 {"idle_ticks", st.idle_ticks},
                 {"simulated_s", r.end_time_s},
                 {"busy_s", st.busy_seconds},
                 {"forward_s", st.forward_seconds},
                 {"swap_s", st.swap_seconds},
                 {"swap_stall_s", st.swap_stall_seconds},
                 {"prompt_tokens_computed", st.prompt_tokens_computed},
                 {"decode_tokens", st.decode_tokens},
                 {"max_running", st.max_running},
                 {"max_paused", st.max_paused},
                 {"max_waiting", st.max_waiting},
                 {"peak_device_blocks", st.peak_device_blocks},
                 {"peak_host_blocks", st.peak_host_blocks},
                 {"wall_s", r.wall_seconds}};
  return j;
}

}  // namespace

int run_simulate(int argc, char** argv) {
  CLI::App app{
      "`infercept bench` without a model: the same workloads, the real scheduler, "
      "policies and estimators, in virtual time on a cost model (an hour of traffic "
      "in seconds).",
      "infercept simulate"};
  set_up_app(app, "infercept simulate --profile h200-llama2-7b --rate 5 --duration 3600");
  SimulateFlags f;
  add_simulate_flags(app, f);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto deployment = deployment_from(f);
  if (!deployment.ok()) return fail(deployment.error());
  auto run = workload_from(f.workload);
  if (!run.ok()) return fail(run.error());
  if (f.workload.trace_only) return 0;
  if (!given(f.shared_prefix_opt)) {
    if (run->shared_prefix_tokens > ((int64_t)1 << 20))
      return fail(Error{"shared prefix over 2^20 tokens"});
    deployment->cfg.shared_prefix_tokens = run->shared_prefix_tokens;
  }
  deployment->cfg.duration_s = run->duration_s;
  deployment->cfg.drain_s = run->drain_s;

  // On a terminal: the simulated time, the requests done and their rate, as it runs.
  ProgressLine progress("simulate");
  progress.show(std::to_string(run->trace.size()) + " requests over " +
                std::to_string((long long)run->duration_s) + " s of arrivals ...");
  deployment->cfg.progress = [&](double sim_s, int64_t done) { progress.update(sim_s, done); };
  auto result = simulate(deployment->cfg, run->trace);
  progress.finish();
  if (!result.ok()) return fail(result.error());
  if (!f.quiet) {
    print_deployment(*deployment, *result);
    print_run(*deployment, *run, *result);
  }
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path);
    if (!out) return fail(Error{"cannot write '" + f.json_path + "'"});
    out << results_json(*deployment, *run, *result).dump(2) << "\n";
  }
  return 0;
}

}  // namespace infercept::cli
