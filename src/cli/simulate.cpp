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

#include "cli/common.h"
#include "cli/workload_options.h"
#include "engine/simulator.h"
#include "sched/scheduler.h"
#include "workload/metrics.h"
#include "workload/trace.h"
#include "workload/workload.h"

namespace infercept::cli {

int run_simulate(int argc, char** argv) {
  auto args = Args::parse(argc, argv,
                          merge({kWorkloadFlags,
                                 {"profile",
                                  "policy",
                                  "estimator",
                                  "json",
                                  "step-trace",
                                  "kv-cache-tokens",
                                  "kv-cache-gb",
                                  "kv-cache-mb",
                                  "swap-space-tokens",
                                  "swap-space-gb",
                                  "swap-space-mb",
                                  "max-batch-tokens",
                                  "max-partial-prefills",
                                  "long-prefill-tokens",
                                  "max-seqs",
                                  "block-size",
                                  "interception-timeout",
                                  "gpus",
                                  "tp-efficiency",
                                  "copy-mode",
                                  "model-context",
                                  "idle-tick",
                                  "context-cost-us",
                                  "sequence-cost-us",
                                  "sample-cost-us",
                                  "graph-miss-ms",
                                  "step-jitter",
                                  "first-sight-ms",
                                  "graph-cache",
                                  "jitter-seed",
                                  "gpu-memory-utilization"}}),
                          {"quiet", "check-invariants", "no-hints"});
  if (!args.ok()) return fail(args.error());
  const Args& a = *args;

  // The machine.
  auto profile = load_sim_profile(a.get("profile", "h200-llama2-7b"));
  if (!profile.ok()) return fail(profile.error());
  auto gpus = a.get_int("gpus", 1);
  if (!gpus.ok()) return fail(gpus.error());
  if (*gpus < 1 || *gpus > 1024) return fail(Error{"--gpus must be in [1, 1024]"});
  auto eff = a.get_double("tp-efficiency", default_tp_efficiency((int)*gpus));
  if (!eff.ok()) return fail(eff.error());
  if (!(*eff > 0.0 && *eff <= 1.0)) return fail(Error{"--tp-efficiency must be in (0, 1]"});
  SimConfig cfg;
  // Overrides of the step terms, in us per device as the profile gives them (then scaled
  // with the GPUs); --context-cost-us makes the context term one constant, 0 removes it.
  CostModel one = profile->cost;
  double context_s = -1.0;  // not given
  for (const auto& [flag, seconds] : {std::pair{"context-cost-us", &context_s},
                                      std::pair{"sequence-cost-us", &one.sequence_seconds},
                                      std::pair{"sample-cost-us", &one.sample_seconds_per_row}}) {
    if (!a.has(flag)) continue;
    auto us = a.get_double(flag, 0.0);
    if (!us.ok()) return fail(us.error());
    if (!(*us >= 0.0)) return fail(Error{std::string("--") + flag + " must be >= 0"});
    *seconds = *us * 1e-6;
  }
  if (context_s == 0.0) one.context_samples.clear();
  if (context_s > 0.0) one.context_samples = {{1, context_s}};
  cfg.cost = scale_cost_model(one, (int)*gpus, *eff);
  const std::string copy_mode = a.get("copy-mode", profile->copies_overlap ? "overlap" : "stall");
  if (copy_mode != "overlap" && copy_mode != "stall")
    return fail(Error{"--copy-mode must be overlap or stall, got '" + copy_mode + "'"});
  cfg.copies_overlap = copy_mode == "overlap";
  // The engine's artifacts: the profile's, or the flags' (0 turns them off).
  cfg.artifacts = profile->artifacts;
  // --graph-cache N: the engine's graph cache of N graphs (0: the batch-change rule).
  if (a.has("graph-cache")) {
    auto n = a.get_int("graph-cache", 0);
    if (!n.ok()) return fail(n.error());
    if (*n < 0 || *n > 100000) return fail(Error{"--graph-cache must be in [0, 100000]"});
    cfg.artifacts.graph_cache_entries = *n;
  }
  // --graph-miss-ms NEW,SECOND (EngineArtifacts::new_batch_seconds).
  if (a.has("graph-miss-ms")) {
    const std::string v = a.get("graph-miss-ms", "");
    const size_t comma = v.find(',');
    char* end1 = nullptr;
    char* end2 = nullptr;
    const double first = comma == std::string::npos ? -1.0 : std::strtod(v.c_str(), &end1);
    const double second =
        comma == std::string::npos ? -1.0 : std::strtod(v.c_str() + comma + 1, &end2);
    if (comma == std::string::npos || end1 != v.c_str() + comma || end2 == nullptr || *end2 != 0 ||
        !(first >= 0.0) || !(second >= 0.0) || first > 1000.0 || second > 1000.0)
      return fail(Error{"--graph-miss-ms wants two milliseconds NEW,SECOND (each 0-1000), got '" +
                        v + "'"});
    cfg.artifacts.new_batch_seconds = first * 1e-3;
    cfg.artifacts.second_batch_seconds = second * 1e-3;
  }

  // --first-sight-ms MS (EngineArtifacts::first_sight_seconds).
  if (a.has("first-sight-ms")) {
    auto first_sight = a.get_double("first-sight-ms", 0.0);
    if (!first_sight.ok()) return fail(first_sight.error());
    if (!(*first_sight >= 0.0 && *first_sight <= 1000.0))
      return fail(Error{"--first-sight-ms must be in [0, 1000]"});
    cfg.artifacts.first_sight_seconds = *first_sight * 1e-3;
  }

  // --step-jitter SIGMA, --jitter-seed N: lognormal step-time noise (SimConfig::step_jitter).
  auto jitter = a.get_double("step-jitter", 0.0);
  if (!jitter.ok()) return fail(jitter.error());
  if (!(*jitter >= 0.0 && *jitter <= 1.0))
    return fail(Error{"--step-jitter must be in [0, 1] (the log-normal sigma)"});
  cfg.step_jitter = *jitter;
  auto jitter_seed = a.get_int("jitter-seed", 1);
  if (!jitter_seed.ok()) return fail(jitter_seed.error());
  if (*jitter_seed < 0) return fail(Error{"--jitter-seed must be >= 0"});
  cfg.jitter_seed = (uint64_t)*jitter_seed;

  // The engine's sizes, as bench's flags.
  cfg.policy = a.get("policy", cfg.policy);
  cfg.estimator = a.get("estimator", cfg.estimator);
  cfg.hints = !a.flag("no-hints");
  cfg.check_invariants = a.flag("check-invariants");
  if (a.has("step-trace")) cfg.step_trace_path = a.get("step-trace");
  auto bs = a.get_int("block-size", cfg.block_size);
  auto mbt = a.get_int("max-batch-tokens", cfg.max_tokens_per_step);
  auto ms = a.get_int("max-seqs", cfg.max_seqs);
  auto mctx = a.get_int("model-context", profile->max_context);
  auto mpp = a.get_int("max-partial-prefills", cfg.max_partial_prefills);
  auto lpt = a.get_int("long-prefill-tokens", cfg.long_prefill_tokens);
  for (auto* r : {&bs, &mbt, &ms, &mctx, &mpp, &lpt})
    if (!r->ok()) return fail(r->error());
  cfg.block_size = *bs;
  cfg.max_tokens_per_step = *mbt;
  cfg.max_seqs = *ms;
  cfg.max_context = *mctx;
  cfg.max_partial_prefills = *mpp;
  cfg.long_prefill_tokens = *lpt;
  if (cfg.max_partial_prefills < 1 || cfg.long_prefill_tokens < 0)
    return fail(Error{"--max-partial-prefills must be >= 1, --long-prefill-tokens >= 0"});
  if (cfg.block_size <= 0 || cfg.max_tokens_per_step <= 0 || cfg.max_seqs <= 0 ||
      cfg.max_context < 0)
    return fail(
        Error{"--block-size, --max-batch-tokens and --max-seqs must be > 0, --model-context >= 0"});
  auto timeout = a.get_double("interception-timeout", cfg.interception_timeout_s);
  auto tick = a.get_double("idle-tick", cfg.idle_tick_s);
  auto util = a.get_double("gpu-memory-utilization", 0.9);
  for (auto* r : {&timeout, &tick, &util})
    if (!r->ok()) return fail(r->error());
  cfg.interception_timeout_s = *timeout;
  cfg.idle_tick_s = *tick;
  if (!(cfg.interception_timeout_s > 0.0) || !(cfg.idle_tick_s > 0.0))
    return fail(Error{"--interception-timeout and --idle-tick must be > 0"});

  // KV pools: explicit tokens, else GiB of the shape's KV bytes per token, else what the
  // profile's device would give (built-in profiles), else bench's defaults (256 MiB each).
  const double m = cfg.cost.kv_bytes_per_token;
  auto pool = [&](const char* tokens_flag, const char* gb_flag, const char* mb_flag,
                  int64_t fallback) -> Result<int64_t> {
    if (a.has(tokens_flag)) return a.get_int(tokens_flag, 0);
    double mib = -1.0;
    if (a.has(gb_flag)) {
      TRY_ASSIGN(double gb, a.get_double(gb_flag, 0.0));
      mib = gb * 1024.0;
    } else if (a.has(mb_flag)) {
      TRY_ASSIGN(mib, a.get_double(mb_flag, 0.0));
    }
    if (mib < 0.0) return fallback;
    return (int64_t)(mib * 1024.0 * 1024.0 / m);
  };
  const int64_t bench_default = (int64_t)(256.0 * 1024.0 * 1024.0 / m);
  int64_t kv_default = profile->default_kv_cache_tokens((int)*gpus, *util);
  if (kv_default <= 0) kv_default = bench_default;
  // Host memory of the H200 machines: 128 GiB for one GPU, 560 for eight; 64 GiB per GPU.
  const int64_t swap_default = profile->device_memory_gib > 0.0
                                   ? (int64_t)(64.0 * (double)*gpus * 1024.0 * 1024.0 * 1024.0 / m)
                                   : bench_default;
  auto kv = pool("kv-cache-tokens", "kv-cache-gb", "kv-cache-mb", kv_default);
  auto swap = pool("swap-space-tokens", "swap-space-gb", "swap-space-mb", swap_default);
  if (!kv.ok()) return fail(kv.error());
  if (!swap.ok()) return fail(swap.error());
  if (*kv <= 0 || *swap < 0) return fail(Error{"the KV cache must be > 0 tokens, swap space >= 0"});
  cfg.kv_cache_tokens = *kv;
  cfg.swap_space_tokens = *swap;

  // The workload, exactly as bench draws or reads it.
  auto run = workload_from(a);
  if (!run.ok()) return fail(run.error());
  const std::string& wl = run->name;
  const std::vector<TraceRequest>& trace = run->trace;
  const double duration = run->duration_s;
  cfg.duration_s = duration;
  cfg.drain_s = run->drain_s;

  auto result = simulate(cfg, trace);
  if (!result.ok()) return fail(result.error());
  const SimResult& r = *result;
  const SimStats& st = r.stats;
  const Summary sum = summarize(r.records, duration);
  const double gb = 1e9;
  const double rate = trace.empty() ? 0.0 : (double)trace.size() / duration;
  if (!a.flag("quiet")) {
    std::printf("SIMULATED: profile %s (%s), %lld GPU(s) at TP efficiency %.2f, copies %s\n",
                profile->name.c_str(), profile->source.c_str(), (long long)*gpus,
                *gpus > 1 ? *eff : 1.0, copy_mode.c_str());
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
        (long long)st.swapped_out_tokens, (long long)st.swapped_in_tokens,
        (long long)st.preemptions, (long long)st.swap_preemptions, (long long)r.skipped);
    std::printf("decisions discard/swap/preserve %lld/%lld/%lld\n", (long long)st.discard_decisions,
                (long long)st.swap_decisions, (long long)st.preserve_decisions);
    std::printf("waste (GB*s): recompute %.3f, preserve %.3f, swap stall %.3f\n",
                st.waste_recompute / gb, st.waste_preserve / gb, st.waste_swap_stall / gb);
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
  if (a.has("json")) {
    nlohmann::json j;
    j["simulated"] = true;
    j["profile"] = profile->name;
    j["gpus"] = *gpus;
    j["tp_efficiency"] = *gpus > 1 ? *eff : 1.0;
    j["copy_mode"] = copy_mode;
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
    j["decisions"] = {{"discard", st.discard_decisions},
                      {"swap", st.swap_decisions},
                      {"preserve", st.preserve_decisions}};
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
    std::ofstream out(a.get("json"));
    if (!out) return fail(Error{"cannot write '" + a.get("json") + "'"});
    out << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace infercept::cli
