// The simulator behind `infercept simulate`: the real Scheduler, interception policies,
// duration estimators and KV bookkeeping (a BlockAllocator for each tier) driven by a
// cost-model executor instead of a model, in virtual time.
//
// What is real: every scheduling decision (continuous batching, chunked prefill, preemption,
// the policy's keep/swap/discard per paused request per step, swap-in order, FCFS queues),
// the estimators' learning, the block accounting of both tiers and the step's accounting,
// which is the engine's own step loop (engine/step_loop.h; recompute, preserve, swap stall).
// What is modelled: a step lasts CostModel::step_seconds(): T_fwd(x) for its x query tokens
// from the CostModel (the profiler's cache format, or a built-in H200 profile), plus the
// terms T_fwd(x) lacks when the profile has them (the built-in H200 profiles do; a cache of
// `infercept profile` has what it measured): the KV the step's sequences already hold, per
// context token, at a decode row's price or a prefill chunk's; a decode-only step's own time
// (the engine replays those from CUDA graphs); each sequence past the first; each sampled row
// past the first. The step's block copies take
// bytes / bandwidth per direction and either overlap the step (only what exceeds the step
// stalls: the CUDA backend's copy streams) or stall it in full (the CPU backend copies on
// the engine thread; and the `swap` policy's synchronous whole-context swap, always); a
// generated token is a placeholder (no sampling), so a request generates exactly its
// scripted counts. Time is virtual: a discrete-event loop of arrivals (the trace), tool
// returns (after each segment's tool_seconds) and engine steps back to back while there is
// work; while only paused requests exist the engine ticks every `idle_tick_s` as
// `infercept bench` does (so time-driven policies such as ttl still act).
//
// The event loop mirrors `infercept bench` (src/cli/bench.cpp) against the engine: arrivals
// and tool returns are admitted between steps, a request that cannot fit the engine at all
// is skipped, the tool's true duration is passed as the hint (the oracle estimator's input),
// and a run stops at `duration_s + drain_s` of virtual time or when every request is done.
//
// Tensor parallelism (`gpus` > 1) is a scaling of a one-GPU profile, not a measurement:
// T_fwd_N(x) = T_fwd_1(x) / (N * e), copy bandwidth x N (one link per GPU), KV capacity the
// sum over the GPUs; e is the tensor-parallel efficiency, by default 0.9^log2(N) (2 GPUs 0.90,
// 4 GPUs 0.81, 8 GPUs 0.73: NVLink all-reduces twice per layer, relatively heavier on the
// small, latency-bound steps that dominate decoding).
//
// Dependency direction: this lives in the engine library (which links sched) and uses the
// workload library's plain data structs (TraceRequest, RequestRecord) through their headers
// only: no out-of-line workload function is called, so the engine library does not link
// workload. The sched library knows nothing of it.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/result.h"
#include "engine/profile_file.h"
#include "engine/resume_ttft.h"
#include "engine/step_loop.h"
#include "sched/cost_model.h"
#include "sched/duration_estimator.h"
#include "workload/metrics.h"
#include "workload/trace.h"

namespace infercept {

// A machine to simulate: a one-GPU (or CPU) cost model and the defaults that come with it.
struct SimProfile {
  std::string name;
  CostModel cost;              // T_fwd samples, KV bytes per token, copy bandwidth, S
  bool copies_overlap = true;  // false: every copy stalls the step (the CPU backend)
  // Built-in profiles only (0 otherwise): device memory and weights per the whole model, so
  // that the default KV pool is what `--gpu-memory-utilization 0.9` would give.
  double device_memory_gib = 0.0;  // one device
  double weights_gib = 0.0;        // the whole model (bf16)
  int64_t max_context = 0;         // the model's context length; 0 = no limit beyond the cache
  EngineArtifacts artifacts;       // built-ins: fitted to their step probes; a JSON file's keys
  std::string source;              // where the numbers come from (printed with the results)

  // KV cache tokens a `gpus`-way tensor-parallel deployment has at memory utilization
  // `util` (0.9 like vLLM), after the weights and ~2 GiB per device of activations and
  // workspace. 0 when the profile has no device memory figure.
  int64_t default_kv_cache_tokens(int gpus, double util = 0.9) const;
};

// Built-in profiles measured on the lent H200 (bench-forward and the step traces named in
// simulator.cpp; bf16 weights and KV): h200-llama2-7b, h200-llama3-8b, h200-llama2-13b.
const std::vector<std::string>& builtin_sim_profile_names();
// A built-in name, or a path to a cost-model JSON file (`infercept profile`'s cache, with the
// keys of profile_file.h). Its copies overlap the step as its "copies_overlap" says; an older
// file without the key copies synchronously when its name says it was profiled on the CPU
// (`.profile-cpu-`).
Result<SimProfile> load_sim_profile(const std::string& name_or_path);

// The tensor-parallel efficiency used when none is given: 0.9^log2(gpus).
double default_tp_efficiency(int gpus);
// A one-device cost model scaled to `gpus` devices at efficiency `efficiency` (see above):
// T_fwd and the context and per-sequence terms are device work and divide; the per-row
// sampling cost is the host's and does not.
CostModel scale_cost_model(const CostModel& one, int gpus, double efficiency);

struct SimConfig {
  CostModel cost;              // already scaled to the deployment (scale_cost_model)
  bool copies_overlap = true;  // see SimProfile
  int64_t block_size = 16;
  int64_t kv_cache_tokens = 0;    // device pool, rounded up to whole blocks (> 0)
  int64_t swap_space_tokens = 0;  // host pool; at least one block, as in EngineCore
  int64_t max_tokens_per_step = 512;
  int64_t max_seqs = 64;
  int64_t max_partial_prefills = 4;  // as EngineConfig
  int64_t long_prefill_tokens = 0;
  int64_t max_context = 0;  // the model's limit; 0 = only the cache limits a request
  // The prefix cache (EngineConfig::prefix_cache), and tokens of one system prompt in front
  // of every drawn prompt (bench --shared-prefix). With either, prompts and tool results get
  // token content (a request's own, deterministic), so a cached prefix is found exactly where
  // the engine would find it; without, every token is 0 as before.
  bool prefix_cache = false;
  int64_t shared_prefix_tokens = 0;
  // The disk tier (`--kv-disk-dir`/`--kv-disk-gb`): how many KV tokens it holds (whole
  // blocks; 0 = none). Its writes and reads take bytes / the cost model's disk bandwidths on
  // one queue beside the steps, as the engine's I/O thread runs them (engine/disk_mover.h).
  int64_t disk_tokens = 0;
  std::string policy = "minwaste";
  std::string estimator = "learned";
  double interception_timeout_s = 600.0;
  bool hints = true;         // give the tool's true duration as the hint (as bench does)
  double duration_s = 60.0;  // the arrival window (throughput = completed / duration_s)
  double drain_s = std::numeric_limits<double>::infinity();  // then stop at duration + drain
  double idle_tick_s = 0.05;  // engine wake-up while only paused requests exist
  // Called every 1,000 steps with the virtual time and the requests finished so far (the
  // command line's progress line); empty: none.
  std::function<void(double sim_s, int64_t done)> progress;
  bool check_invariants = false;  // Scheduler::check_invariants() after every step (tests)
  EngineArtifacts artifacts;      // the CUDA engine's costs its scheduler does not see (none: 0)
  // Step-time noise, 0 by default: every forward step's time is multiplied by a lognormal
  // factor of mean 1 whose log has this standard deviation, drawn from jitter_seed. The
  // engine's replayed decode steps scatter by ~1-3% around their median (H200 traces,
  // H200 traces of 2026-12-01), and near a knee such differences decide whether a
  // preemption cascade starts; simulations with several seeds give the spread a deterministic
  // one hides.
  double step_jitter = 0.0;
  uint64_t jitter_seed = 1;
  std::string
      step_trace_path;  // one CSV row per step, as `bench --step-trace` (sched/step_trace.h)
};

// The step loop's counters and waste by cause (StepStats, as EngineStats), plus what only a
// simulation knows.
struct SimStats : StepStats {
  int64_t idle_ticks = 0;  // schedule() calls while only paused requests existed
};

struct SimResult {
  std::vector<RequestRecord> records;  // one per admitted request, completed or not
  // Seconds from each tool's answer to the resumed request's next token (as bench measures
  // resumed turns' first token), in the order they came and by where the KV was.
  ResumeTtft resume_ttft;
  SimStats stats;
  std::vector<ToolStats> tools;      // what the estimator learned
  int64_t submitted = 0;             // requests admitted
  int64_t skipped = 0;               // requests that cannot fit the engine at all
  double end_time_s = 0.0;           // virtual time when the run stopped
  int64_t kv_cache_tokens = 0;       // device pool (whole blocks)
  int64_t swap_space_tokens = 0;     // host pool (whole blocks)
  int64_t device_blocks_in_use = 0;  // at the end: 0 after a complete drain
  int64_t host_blocks_in_use = 0;
  double wall_seconds = 0.0;  // host time the simulation took
};

// Replays `trace` (arrival order) through the scheduler. Errors: a bad config (unknown
// policy or estimator, an empty cache, an invalid cost model).
Result<SimResult> simulate(const SimConfig& config, const std::vector<TraceRequest>& trace);

}  // namespace infercept
