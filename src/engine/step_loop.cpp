#include "engine/step_loop.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "core/check.h"

namespace infercept {

namespace {
double host_clock() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}
}  // namespace

StepLoop::StepLoop(Scheduler& sched, const BlockAllocator& device, const BlockAllocator& host,
                   DurationEstimator& estimator, StepStats& stats, double kv_bytes_per_token,
                   double interception_timeout_s, StepTraceWriter* trace, bool check_invariants)
    : sched_(sched),
      device_(device),
      host_(host),
      estimator_(estimator),
      kv_bytes_per_token_(kv_bytes_per_token),
      interception_timeout_s_(interception_timeout_s),
      trace_(trace),
      check_invariants_(check_invariants),
      stats_(stats) {}

double DiskMover::next_done() const {
  return std::numeric_limits<double>::infinity();
}

// Paused requests nobody answered in time give their KV back (their tokens stay, so a late
// resume still works by recomputation).
// (release_paused does not change the paused list, so it is walked in place: no copy of it
// per step, where the simulator holds hundreds of paused requests.)
void StepLoop::expire_paused(double now) {
  for (Sequence* s : sched_.paused())
    if (s->interception && !s->interception->expired && s->n_computed > 0 &&
        now - s->interception->call_time > interception_timeout_s_) {
      sched_.release_paused(s);
      stats_.expirations++;
    }
}

void StepLoop::count_plan(const StepPlan& plan) {
  StepStats& st = stats_;
  st.preemptions += (int64_t)plan.preempted.size();
  st.swap_preemptions += plan.n_swap_preemptions;
  st.recomputed_tokens += plan.dropped_tokens;
  st.discard_decisions += plan.n_discards;
  st.swap_decisions += plan.n_swap_decisions;
  st.preserve_decisions += plan.n_preserve_decisions;
  const int64_t bs = sched_.config().block_size;
  st.swapped_out_tokens += (int64_t)plan.swap_out.size() * bs;
  st.swapped_in_tokens += (int64_t)plan.swap_in.size() * bs;
  st.max_running = std::max<int64_t>(st.max_running, (int64_t)sched_.n_running());
  st.max_paused = std::max<int64_t>(st.max_paused, (int64_t)sched_.n_paused());
  st.max_waiting = std::max<int64_t>(st.max_waiting, (int64_t)sched_.n_waiting());
  // Blocks requests hold (idle cached blocks are the prefix cache's, evictable at will).
  st.peak_device_blocks = std::max<int64_t>(st.peak_device_blocks, device_.n_held());
  st.peak_host_blocks = std::max<int64_t>(st.peak_host_blocks, host_.n_held());
  const PrefixCacheCounters& pc = sched_.prefix_counters();
  st.prefix_query_tokens = pc.query_tokens;
  st.prefix_hit_tokens = pc.hit_tokens;
  st.prefix_evicted_blocks = pc.evicted_blocks;
  st.prefix_demoted_blocks = pc.demoted_blocks;
  st.prefix_promoted_blocks = pc.promoted_blocks;
  const DiskCounters& dc = sched_.disk_counters();
  st.spill_decisions += plan.n_spill_decisions;
  st.prefetches += plan.n_prefetches;
  st.spilled_tokens = dc.spilled_blocks * bs;
  st.restored_tokens = dc.restored_blocks * bs;
  st.spilled_bytes = (double)st.spilled_tokens * kv_bytes_per_token_;
  st.restored_bytes = (double)st.restored_tokens * kv_bytes_per_token_;
  st.disk_write_failures = dc.write_failures;
  st.disk_read_failures = dc.read_failures;
  st.spills_undone = dc.spills_undone;
  // The scheduler accrues the device tokens paused requests hold over time at every plan.
  st.waste_preserve = sched_.preserved_token_seconds() * kv_bytes_per_token_;
}

void StepLoop::note_resume(const Sequence& s, double now) {
  CHECK(s.interception.has_value());
  estimator_.observe(s.interception->tool, now - s.interception->call_time);
  stats_.resumes++;
}

StepTiming StepLoop::step(double now, StepExecutor& executor, StepRequests& requests) {
  StepStats& st = stats_;
  expire_paused(now);
  // Disk jobs that ended since the last step: spilled KV frees its host blocks, restored KV
  // can be swapped in, a failure keeps the KV on the host or drops it for recomputation.
  if (disk_ != nullptr) {
    disk_done_.clear();
    disk_->poll(now, disk_done_);
    for (const DiskDone& d : disk_done_) sched_.disk_done(d);
  }
  const double t_plan = host_clock();
  StepPlan plan = sched_.schedule(now);
  const double plan_s = host_clock() - t_plan;
  count_plan(plan);
  StepTraceRow trace_row;
  if (trace_ != nullptr) trace_row = step_trace_row(plan, sched_, device_, now);
  // The KV the batch holds during the step (the waste terms): what its sequences held before
  // it (read by attention) and what it adds.
  describe_step(plan, shape_);
  CHECK(shape_.query_tokens == plan.n_tokens);
  const int64_t batch_tokens = shape_.context_tokens + shape_.query_tokens;
  const double m = kv_bytes_per_token_;

  tokens_.clear();
  const StepTiming timing = executor.execute(plan, shape_, tokens_);
  // The disk jobs start after the plan's copies (a restore may fill a host block a swap-in of
  // this step read), and run beside the next steps.
  if (disk_ != nullptr &&
      !(plan.spill_out.empty() && plan.spill_in.empty() && plan.disk_drops.empty()))
    disk_->submit(plan, now + timing.duration());
  st.swap_seconds += timing.copy_seconds;
  st.swap_stall_seconds += timing.stall_seconds;
  st.waste_swap_stall += timing.stall_seconds * (double)batch_tokens * m;
  st.busy_seconds += timing.duration();
  if (plan.scheduled.empty()) {
    if (timing.copy_seconds > 0.0) st.copy_only_steps++;
    if (trace_ != nullptr && plan_did_something(plan)) trace_->write(trace_row);
    if (check_invariants_) sched_.check_invariants();
    return timing;
  }
  if (!timing.ran) {
    // Given up part-way: nothing to commit, and not a trace row (the step did not happen;
    // the gap before the next row's `t` holds it).
    st.interrupted_steps++;
    st.interrupted_seconds += timing.forward_seconds;
    if (check_invariants_) sched_.check_invariants();
    return timing;
  }
  st.host_prepare_seconds += plan_s + timing.host_seconds;
  if (trace_ != nullptr) {
    trace_row.seconds = timing.forward_seconds;
    trace_row.replayed = timing.replayed;
    trace_->write(trace_row);
  }
  st.steps++;
  if (shape_.decode_only()) {
    st.decode_only_steps++;
    st.decode_only_seconds += timing.forward_seconds;
  }
  st.forward_seconds += timing.forward_seconds;
  // Recompute waste: the step's share spent on rows whose KV had existed before (below the
  // high-water mark), times the KV the batch holds meanwhile.
  int64_t recompute_rows = 0;
  for (const ScheduledSeq& ss : plan.scheduled)
    recompute_rows +=
        std::max<int64_t>(0, std::min(ss.seq->n_computed_peak, ss.seq->n_computed + ss.n_tokens) -
                                 ss.seq->n_computed);
  st.recompute_rows += recompute_rows;
  if (recompute_rows > 0)
    st.waste_recompute += timing.forward_seconds * (double)recompute_rows / (double)plan.n_tokens *
                          (double)batch_tokens * m;
  sched_.commit(plan);

  // Each sampled token, in plan order, to its request.
  const double end = now + timing.duration();
  finished_.clear();
  paused_.clear();
  size_t row = 0;
  for (const ScheduledSeq& ss : plan.scheduled) {
    Sequence& s = *ss.seq;
    if (ss.is_prompt()) st.prompt_tokens_computed += ss.n_tokens;
    if (!ss.sample) continue;
    CHECK_LT(row, tokens_.size());
    const int32_t token = tokens_[row];
    s.tokens.push_back(token);
    st.decode_tokens++;
    TokenOutcome outcome = requests.on_token(s, token, row, end);
    ++row;
    switch (outcome.kind) {
      case TokenOutcome::Kind::go_on:
        break;
      case TokenOutcome::Kind::finish:
        finished_.push_back(&s);
        break;
      case TokenOutcome::Kind::pause:
        outcome.pause.call_time = end;
        sched_.intercept(&s, std::move(outcome.pause));
        st.interceptions++;
        paused_.push_back(&s);
        break;
    }
  }
  CHECK_EQ(row, tokens_.size());
  for (Sequence* s : paused_) requests.on_paused(*s, end);
  for (Sequence* s : finished_) {
    sched_.finish(s);
    requests.on_finished(*s, end);
  }
  if (check_invariants_) sched_.check_invariants();
  return timing;
}

}  // namespace infercept
