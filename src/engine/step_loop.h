// The engine step, once, for the engine and the simulator: expiry of paused requests, the
// scheduler's plan, its execution by an executor, the step's accounting (plan statistics,
// waste, peaks), the commit, and what each sampled token means for its request. The
// executor either runs the model on a backend (EngineCore) or prices the step with the cost
// model (the simulator): what differs between the two is only what a step costs and which
// token it yields, so the simulator cannot drift from the engine's bookkeeping (docs/DESIGN.md
// "One step loop").
//
//   StepLoop loop(sched, device, host, ...);
//   loop.step(now, executor, requests);   // one step; returns its timing
//
// The request side (StepRequests) turns a sampled token into an outcome (go on, finish,
// pause for a tool); the loop applies it to the scheduler and counts it.
#pragma once

#include <cstdint>
#include <vector>

#include "sched/cost_model.h"
#include "sched/duration_estimator.h"
#include "sched/scheduler.h"
#include "sched/step_trace.h"

namespace infercept {

// What the engine and the simulator count, the same way (docs/DESIGN.md "Interception": the
// waste terms).
struct StepStats {
  int64_t steps = 0;                 // steps with a forward pass
  int64_t decode_only_steps = 0;     // of which every sequence computed one row
  double decode_only_seconds = 0.0;  // their share of forward_seconds
  int64_t copy_only_steps = 0;       // plans with copies but nothing to run
  int64_t interrupted_steps = 0;     // forward passes given up for a newcomer (not in `steps`)
  double interrupted_seconds = 0.0;  // the time they had run (lost work)
  int64_t interceptions = 0, resumes = 0, expirations = 0;
  int64_t discard_decisions = 0, swap_decisions = 0, preserve_decisions = 0;
  int64_t swapped_out_tokens = 0, swapped_in_tokens = 0;  // whole blocks
  int64_t prompt_tokens_computed = 0;  // prefill rows run, recomputation included
  int64_t decode_tokens = 0;           // tokens sampled
  int64_t preemptions = 0;
  int64_t swap_preemptions = 0;   // of which the KV went to the host tier (minwaste)
  int64_t recomputed_tokens = 0;  // computed tokens whose KV was dropped
  int64_t recompute_rows = 0;     // rows run again because their KV had been dropped
  double forward_seconds = 0.0;
  double busy_seconds = 0.0;          // forward + stalls
  double swap_seconds = 0.0;          // time copying between tiers
  double swap_stall_seconds = 0.0;    // copy time not hidden under a forward pass
  double host_prepare_seconds = 0.0;  // scheduling + step input preparation (steps that ran)
  // Byte-seconds of KV (docs/DESIGN.md): recomputed rows' share of a step x the KV the batch
  // holds; device KV held by paused requests x time (accrued every step, while they wait);
  // copy time not hidden x the KV the batch holds.
  double waste_recompute = 0.0;
  double waste_preserve = 0.0;
  double waste_swap_stall = 0.0;
  int64_t max_running = 0, max_paused = 0, max_waiting = 0;
  int64_t peak_device_blocks = 0, peak_host_blocks = 0;
  // The prefix cache (Scheduler::prefix_counters, copied at every plan): prompt tokens looked up
  // when requests were admitted and how many of them were found cached (vLLM's prefix_cache_queries
  // / _hits); cached blocks evicted from the device tier, of which demoted to the host tier; host
  // blocks promoted back on a hit.
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
  int64_t prefix_evicted_blocks = 0, prefix_demoted_blocks = 0, prefix_promoted_blocks = 0;
  // The disk tier (Scheduler::disk_counters, copied at every plan): spills decided, tokens
  // (whole blocks) and bytes written host -> disk and read disk -> host by jobs that ended
  // well, jobs that failed (a failed write keeps the KV on the host, a failed read drops it
  // for recomputation), and writes that ended after their request had resumed.
  int64_t spill_decisions = 0;
  // Paused KV brought a tier closer before its tool answered (disk to host, host to device).
  int64_t prefetches = 0;
  int64_t spilled_tokens = 0, restored_tokens = 0;
  double spilled_bytes = 0.0, restored_bytes = 0.0;
  int64_t disk_write_failures = 0, disk_read_failures = 0, spills_undone = 0;
  double prefix_hit_rate() const {
    return prefix_query_tokens > 0 ? (double)prefix_hit_tokens / (double)prefix_query_tokens : 0.0;
  }
};

// What executing one plan took.
struct StepTiming {
  bool ran = true;               // false: the forward pass was given up; nothing is committed
  double forward_seconds = 0.0;  // the forward pass (0 for a plan with copies only)
  double copy_seconds = 0.0;     // the plan's block copies
  double stall_seconds = 0.0;    // copy time the step waited for (not hidden under the forward)
  double host_seconds = 0.0;     // the executor's own preparation of the step
  int replayed = -1;             // 1/0: the forward was (not) replayed from a recording; -1 unknown
  double duration() const { return forward_seconds + stall_seconds; }
};

// Runs or prices a plan: moves its blocks, computes its rows, and samples one token per
// sampled row (in plan order) into `tokens`.
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual StepTiming execute(const StepPlan& plan, const StepShape& shape,
                             std::vector<int32_t>& tokens) = 0;
};

// What a request does after a token was appended to its sequence.
struct TokenOutcome {
  enum class Kind { go_on, finish, pause };
  Kind kind = Kind::go_on;
  InterceptionInfo pause;  // for Kind::pause: the tool it waits for (call_time set by the loop)
  static TokenOutcome go_on() { return {}; }
  static TokenOutcome finish() { return {Kind::finish, {}}; }
  static TokenOutcome pause_for(InterceptionInfo info) { return {Kind::pause, std::move(info)}; }
};

// The requests' side of the step: per-request post-processing (stop strings, detokenizing,
// tool triggers in the engine; scripted segments in the simulator).
class StepRequests {
 public:
  virtual ~StepRequests() = default;
  // `s` sampled `token` (already appended) from logit row `row` of a step that ended at `end`.
  virtual TokenOutcome on_token(Sequence& s, int32_t token, size_t row, double end) = 0;
  // After the scheduler let `s` go (finish) or paused it (pause), at the end of the step.
  virtual void on_finished(Sequence& s, double end) = 0;
  virtual void on_paused(Sequence& s, double end) { (void)s, (void)end; }
};

// The disk tier's side of a step: starts a plan's spills and restores and removes the copies
// it lets go of (kv/disk_tier.h in the engine, bytes over bandwidth in the simulator), and
// says which jobs have ended. Never waits for the disk.
class DiskMover {
 public:
  virtual ~DiskMover() = default;
  // Starts plan.spill_out, plan.spill_in and plan.disk_drops, after the plan's block copies,
  // at `now` (the end of the step).
  virtual void submit(const StepPlan& plan, double now) = 0;
  // Appends the jobs that have ended by `now`; every submitted job is reported once, failed
  // at once or later, even when its copy was dropped meanwhile.
  virtual void poll(double now, std::vector<DiskDone>& done) = 0;
  // When the next job in flight ends, where the mover knows (the simulator's clock); +inf
  // otherwise.
  virtual double next_done() const;
};

class StepLoop {
 public:
  // Counts into `stats` (the owner's: EngineStats and SimStats extend StepStats). `trace` may
  // be null. `kv_bytes_per_token` weighs the waste terms.
  StepLoop(Scheduler& sched, const BlockAllocator& device, const BlockAllocator& host,
           DurationEstimator& estimator, StepStats& stats, double kv_bytes_per_token,
           double interception_timeout_s, StepTraceWriter* trace = nullptr,
           bool check_invariants = false);

  // One step planned at `now` (seconds): `end` of the step is now + the timing's duration.
  StepTiming step(double now, StepExecutor& executor, StepRequests& requests);
  // A paused request's tool answered at `now`: the estimator learns its duration and the
  // resume is counted. The caller then hands the sequence back to the scheduler.
  void note_resume(const Sequence& s, double now);
  // The disk tier (null: none; the scheduler then never plans disk jobs). Not owned.
  void set_disk_mover(DiskMover* disk) { disk_ = disk; }

 private:
  void expire_paused(double now);
  void count_plan(const StepPlan& plan);

  Scheduler& sched_;
  const BlockAllocator& device_;
  const BlockAllocator& host_;
  DurationEstimator& estimator_;
  double kv_bytes_per_token_;
  double interception_timeout_s_;
  StepTraceWriter* trace_;
  DiskMover* disk_ = nullptr;
  std::vector<DiskDone> disk_done_;
  bool check_invariants_;
  StepStats& stats_;
  StepShape shape_;  // reused: its chunk list keeps its capacity across steps
  std::vector<int32_t> tokens_;
  std::vector<Sequence*> finished_, paused_;
};

}  // namespace infercept
