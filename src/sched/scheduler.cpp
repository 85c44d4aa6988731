#include "sched/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace infercept {

namespace {
bool by_arrival(const Sequence* a, const Sequence* b) {
  return a->arrival_time < b->arrival_time;
}
template <typename Q>
void erase_from(Q& q, Sequence* s) {
  q.erase(std::remove(q.begin(), q.end(), s), q.end());
}
}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, BlockAllocator& device, BlockAllocator* host,
                     Policy* policy, const CostModel* cost)
    : config_(config), device_(device), host_(host), policy_(policy), cost_(cost) {
  CHECK_GT(config.block_size, 0);
  CHECK_GT(config.max_tokens_per_step, 0);
  CHECK_GT(config.max_seqs_per_step, 0);
  long_chunk_ = config.long_prefill_tokens > 0
                    ? config.long_prefill_tokens
                    : automatic_long_prefill_chunk(cost, config.max_tokens_per_step,
                                                   config.min_long_prefill_chunk);
}

int64_t Scheduler::capacity_tokens() const {
  return (int64_t)device_.n_blocks() * config_.block_size;
}

void Scheduler::insert_by_arrival(std::deque<Sequence*>& q, Sequence* s) {
  q.insert(std::upper_bound(q.begin(), q.end(), s, by_arrival), s);
}
void Scheduler::insert_by_arrival(std::vector<Sequence*>& q, Sequence* s) {
  q.insert(std::upper_bound(q.begin(), q.end(), s, by_arrival), s);
}

void Scheduler::add(Sequence* seq) {
  CHECK(seq->state == SeqState::waiting && seq->blocks.blocks.empty());
  insert_by_arrival(waiting_, seq);
}

void Scheduler::release_device_blocks(Sequence& s) {
  for (int32_t b : s.blocks.blocks) device_.release(b);
  s.blocks.blocks.clear();
}

void Scheduler::release_host_blocks(Sequence& s) {
  for (int32_t b : s.host_blocks) host_->release(b);
  s.host_blocks.clear();
}

void Scheduler::drop_kv(Sequence& s, StepPlan& plan) {
  release_device_blocks(s);
  if (!s.host_blocks.empty()) release_host_blocks(s);
  plan.dropped_tokens += s.n_computed;
  s.n_recomputed += s.n_computed;
  s.n_computed = 0;
  s.blocks.n_tokens = 0;
}

void Scheduler::finish(Sequence* seq) {
  erase_from(running_, seq);
  erase_from(waiting_, seq);
  erase_from(paused_, seq);
  erase_from(resuming_, seq);
  release_device_blocks(*seq);
  if (!seq->host_blocks.empty()) release_host_blocks(*seq);
  seq->state = SeqState::finished;
}

void Scheduler::intercept(Sequence* seq, InterceptionInfo info) {
  CHECK(seq->state == SeqState::running);
  erase_from(running_, seq);
  seq->state = SeqState::intercepted;
  seq->interception = std::move(info);
  seq->n_interceptions++;
  insert_by_arrival(paused_, seq);
}

void Scheduler::resume(Sequence* seq, const std::vector<int32_t>& returned, double now) {
  CHECK(seq->state == SeqState::intercepted && seq->interception.has_value());
  erase_from(paused_, seq);
  seq->tokens.insert(seq->tokens.end(), returned.begin(), returned.end());
  seq->interception.reset();
  const bool keep_arrival = policy_ == nullptr || policy_->keeps_arrival_on_resume();
  if (seq->n_computed == 0) {
    // Nothing cached (discarded or expired): back through the waiting queue, recomputed by
    // chunked prefill. vLLM's `discard` also sends it to the back of the queue.
    if (!keep_arrival) seq->arrival_time = now;
    seq->state = SeqState::waiting;
    release_device_blocks(*seq);
    insert_by_arrival(waiting_, seq);
  } else if (!seq->host_blocks.empty()) {
    seq->state = SeqState::intercepted;  // still not runnable: its KV is coming back
    insert_by_arrival(resuming_, seq);
  } else {
    seq->state = SeqState::running;
    insert_by_arrival(running_, seq);
  }
}

void Scheduler::release_paused(Sequence* seq) {
  CHECK(seq->state == SeqState::intercepted);
  StepPlan ignored;
  drop_kv(*seq, ignored);
  if (seq->interception) seq->interception->expired = true;
  if (std::find(resuming_.begin(), resuming_.end(), seq) != resuming_.end()) {
    // Already answered but its KV was still coming back: it now recomputes instead.
    erase_from(resuming_, seq);
    seq->state = SeqState::waiting;
    insert_by_arrival(waiting_, seq);
  }
}

void Scheduler::truncate_paused(Sequence* seq, int64_t n_keep) {
  CHECK(seq->state == SeqState::intercepted);
  CHECK(std::find(paused_.begin(), paused_.end(), seq) != paused_.end());
  const int64_t bs = config_.block_size;
  const int64_t keep = std::clamp<int64_t>(n_keep, 0, seq->n_computed);
  const int64_t dev_cap = (int64_t)seq->blocks.blocks.size() * bs;
  if (keep <= dev_cap) {
    if (!seq->host_blocks.empty()) release_host_blocks(*seq);
    const auto need = (size_t)BlockTable::blocks_for(keep, bs);
    while (seq->blocks.blocks.size() > need) {
      device_.release(seq->blocks.blocks.back());
      seq->blocks.blocks.pop_back();
    }
  } else {
    const auto need = (size_t)BlockTable::blocks_for(keep - dev_cap, bs);
    while (seq->host_blocks.size() > need) {
      host_->release(seq->host_blocks.back());
      seq->host_blocks.pop_back();
    }
  }
  seq->n_computed = keep;
  seq->n_computed_peak = keep;
  seq->blocks.n_tokens = std::min(keep, (int64_t)seq->blocks.blocks.size() * bs);
}

// Memory pressure, as the policies that read it (minwaste, ttl) see it: the request next in
// line for device blocks cannot get them from the free pool, or the pool is nearly full.
// Queued requests are served oldest first, so only the oldest waiting and the oldest
// resuming request are counted, and only for what they need before they can run:
//  - a new request: its next prefill chunk (chunked prefill admits it chunk by chunk);
//  - a request whose KV was dropped (preempted by recomputation, discarded or expired while
//    paused): its whole context. It cannot sample before all of it is back, and it is
//    recomputed in small chunks over many steps; counting only the first chunk would leave
//    the rest to be taken, step after step, from paused requests by dropping their KV
//    (free_a_paused_block) when the policy could have swapped it out under the budget;
//  - a resuming request: its host part, plus, after a swap preemption, the headroom that
//    swap_in_resuming() waits for (a block per running sequence).
// Any waiting request used to count as pressure. With chunked prefill every arrival waits
// one step, so minwaste (and ttl) moved or dropped paused KV with most of the cache free:
// the CPU sweep and the simulator both showed it (docs/PERF.md 3.3, docs/BENCHMARKS.md).
bool Scheduler::memory_pressure() const {
  return memory_deficit_blocks() > 0;
}

int64_t Scheduler::memory_deficit_blocks() const {
  const int64_t bs = config_.block_size;
  int64_t need = 0;
  if (!waiting_.empty()) {
    const Sequence* s = waiting_.front();
    const int64_t tokens = s->n_computed_peak > 0
                               ? (int64_t)s->tokens.size()
                               : std::min(s->n_uncomputed(), config_.max_tokens_per_step);
    need += BlockTable::blocks_for(tokens, bs);  // a waiting request holds no blocks
  }
  if (!resuming_.empty()) {
    const Sequence* s = resuming_.front();
    need += (int64_t)s->host_blocks.size();
    if (s->swap_preempted) need += (int64_t)running_.size();
  }
  const int64_t free = (int64_t)device_.n_free();
  if (need > free) return need - free;
  const double floor = config_.pressure_watermark * (double)device_.n_blocks();
  return (double)free < floor ? (int64_t)std::ceil(floor - (double)free) : 0;
}

// Takes one device block from a paused request (newest first) by dropping its KV. Used
// when a running request needs a block and none is free: a paused request can afford the
// recomputation better than a running one can afford to stall.
bool Scheduler::free_a_paused_block(StepPlan& plan) {
  for (auto it = paused_.rbegin(); it != paused_.rend(); ++it) {
    Sequence* s = *it;
    if (s->blocks.blocks.empty()) continue;
    drop_kv(*s, plan);
    plan.n_discards++;
    return true;
  }
  return false;
}

bool Scheduler::ensure_blocks(Sequence& s, int64_t n_tokens_total, StepPlan& plan, double now) {
  (void)now;
  const int64_t need =
      BlockTable::blocks_for(n_tokens_total, config_.block_size) - (int64_t)s.blocks.blocks.size();
  if (need <= 0) return true;
  while (!device_.can_allocate((int32_t)need))
    if (!free_a_paused_block(plan)) return false;
  for (int64_t i = 0; i < need; ++i) s.blocks.blocks.push_back(*device_.allocate());
  return true;
}

// Under minwaste a preempted sequence's KV goes to the host tier when that costs less than
// recomputing it: the copy out now and back later against a prefill of its whole context.
// (Measured on the CPU sweep: recompute-only preemption was minwaste's main loss, because
// memory its swaps freed admitted new work that returning requests then preempted.)
bool Scheduler::swap_preempt_worthwhile(const Sequence& s) const {
  if (host_ == nullptr || policy_ == nullptr || policy_->kind() != PolicyKind::minwaste ||
      cost_ == nullptr || cost_->swap_bytes_per_second <= 0)
    return false;
  if (s.n_computed == 0 || !s.host_blocks.empty() || s.blocks.blocks.empty()) return false;
  if (host_->n_free() < (int32_t)s.blocks.blocks.size()) return false;
  const double bytes = (double)s.n_computed * cost_->kv_bytes_per_token;
  const double copy_s = 2.0 * bytes / cost_->swap_bytes_per_second;
  return copy_s < cost_->t_fwd(s.n_computed);
}

void Scheduler::preempt(Sequence& s, StepPlan& plan) {
  if (swap_preempt_worthwhile(s)) {
    // Swap-style preemption: every device block to the host, in order; the sequence waits in
    // the resuming queue (by arrival) and runs again once its blocks are back.
    const int64_t bs = config_.block_size;
    for (int32_t db : s.blocks.blocks) {
      const auto hb = host_->allocate();
      CHECK(hb.has_value());
      plan.swap_out.push_back({db, *hb});
      s.host_blocks.push_back(*hb);
      device_.release(db);  // the copy runs before anything reuses it (see apply_policy)
    }
    s.blocks.blocks.clear();
    s.n_swapped_out += (int64_t)s.host_blocks.size() * bs;
    s.n_preemptions++;
    s.swap_preempted = true;
    s.state = SeqState::intercepted;  // not runnable until its KV is back, like a resume
    erase_from(running_, &s);
    insert_by_arrival(resuming_, &s);
    plan.preempted.push_back(&s);
    plan.n_swap_preemptions++;
    return;
  }
  // Recompute-style preemption: the KV is dropped and the whole context (prompt and what was
  // generated so far) is prefilled again when the sequence is readmitted.
  drop_kv(s, plan);
  s.n_preemptions++;
  s.state = SeqState::waiting;
  erase_from(running_, &s);
  insert_by_arrival(waiting_, &s);
  plan.preempted.push_back(&s);
}

void Scheduler::apply_policy(StepPlan& plan, double now, int64_t& swap_budget) {
  if (paused_.empty()) return;
  const int64_t bs = config_.block_size;
  if (policy_ == nullptr) {
    plan.n_preserve_decisions += (int64_t)paused_.size();
    return;
  }
  PolicyInput in;
  in.block_size = bs;
  in.free_device_blocks = device_.n_free();
  in.free_host_blocks = host_ != nullptr ? host_->n_free() : 0;
  in.swap_budget_tokens = host_ != nullptr ? swap_budget : 0;
  in.deficit_blocks = memory_deficit_blocks();
  in.memory_pressure = in.deficit_blocks > 0;
  for (const Sequence* s : running_) {
    in.running_context_tokens += (int64_t)s->tokens.size();
    if (s->n_uncomputed() <= 1) in.decode_tokens++;
  }
  std::vector<Sequence*> with_kv;
  for (Sequence* s : paused_) {
    if (s->n_computed == 0) continue;
    PausedView v;
    v.id = s->id;
    v.tool = s->interception->tool;
    v.context_tokens = s->n_computed;
    v.device_tokens = s->device_tokens(bs);
    v.host_tokens = s->host_tokens(bs);
    v.elapsed = std::max(0.0, now - s->interception->call_time);
    v.hint = s->interception->hint;
    in.paused.push_back(v);
    with_kv.push_back(s);
  }
  if (in.paused.empty()) return;
  const std::vector<PausedDecision> decisions = policy_->decide(in);
  CHECK_EQ(decisions.size(), in.paused.size());
  for (size_t i = 0; i < decisions.size(); ++i) {
    Sequence& s = *with_kv[i];
    const PausedDecision& d = decisions[i];
    CHECK_EQ(d.id, s.id);
    switch (d.action) {
      case KvAction::preserve:
        plan.n_preserve_decisions++;
        break;
      case KvAction::discard:
        drop_kv(s, plan);
        plan.n_discards++;
        break;
      case KvAction::swap_out: {
        if (host_ == nullptr || d.swap_out_tokens <= 0) break;
        plan.n_swap_decisions++;
        const bool sync = policy_->kind() == PolicyKind::swap;
        plan.sync_swap = plan.sync_swap || sync;
        // Whole blocks from the back of the device table to the front of the host suffix.
        int64_t blocks = BlockTable::blocks_for(d.swap_out_tokens, bs);
        blocks = std::min<int64_t>(blocks, (int64_t)s.blocks.blocks.size());
        std::vector<int32_t> moved;
        for (int64_t b = 0; b < blocks; ++b) {
          auto hb = host_->allocate();
          if (!hb) break;
          const int32_t db = s.blocks.blocks.back();
          s.blocks.blocks.pop_back();
          plan.swap_out.push_back({db, *hb});
          moved.push_back(*hb);
          device_.release(db);  // the copy runs before anything reuses it this step
        }
        std::reverse(moved.begin(), moved.end());
        s.host_blocks.insert(s.host_blocks.begin(), moved.begin(), moved.end());
        s.n_swapped_out += (int64_t)moved.size() * bs;  // whole blocks move
        if (!sync) swap_budget = std::max<int64_t>(0, swap_budget - (int64_t)moved.size() * bs);
        break;
      }
    }
  }
}

void Scheduler::swap_in_resuming(StepPlan& plan, int64_t& swap_budget) {
  const int64_t bs = config_.block_size;
  const bool sync = policy_ != nullptr && policy_->kind() == PolicyKind::swap;
  for (size_t i = 0; i < resuming_.size();) {
    Sequence& s = *resuming_[i];
    // A sequence preempted by swapping comes back only whole and with a block of headroom
    // per running sequence: partly back it would hold blocks without running, and the
    // running ones would preempt it again at once (swap ping-pong).
    if (s.swap_preempted &&
        (int64_t)device_.n_free() < (int64_t)s.host_blocks.size() + (int64_t)running_.size()) {
      ++i;
      continue;
    }
    // From the front of the host suffix, block by block, while budget and blocks allow.
    while (!s.host_blocks.empty() && (sync || swap_budget >= bs) && device_.n_free() > 0) {
      const auto db = device_.allocate();
      const int32_t hb = s.host_blocks.front();
      s.host_blocks.erase(s.host_blocks.begin());
      plan.swap_in.push_back({hb, *db});
      s.blocks.blocks.push_back(*db);
      host_->release(hb);  // the copy runs before the host block is reused (next step)
      s.n_swapped_in += bs;
      if (sync)
        plan.sync_swap = true;
      else
        swap_budget -= bs;
    }
    if (s.host_blocks.empty()) {
      resuming_.erase(resuming_.begin() + (ptrdiff_t)i);
      s.swap_preempted = false;
      s.state = SeqState::running;
      insert_by_arrival(running_, &s);
    } else {
      ++i;
    }
  }
}

// The FCFS planner (max_partial_prefills = 1): running sequences oldest first, each taking
// min(uncomputed, budget), then waiting ones in arrival order. An old long prefill takes the
// whole budget step after step: younger decode rows and every waiting request wait for it.
void Scheduler::plan_fcfs(StepPlan& plan, int64_t& budget, int64_t recompute_chunk, double now) {
  auto chunk = [&](const Sequence* s) {
    const int64_t n = std::min(s->n_uncomputed(), budget);
    // Only the part below the peak is recomputation; new tokens (a prompt, a tool result)
    // are ordinary chunked prefill under the token budget.
    if (!s->is_recomputing()) return n;
    return std::min(n, std::max<int64_t>(recompute_chunk, 1));
  };
  // 2. Running sequences, oldest first. When the cache is full, paused requests give up
  //    their blocks first, then the newest running sequence is preempted.
  for (size_t i = 0; i < running_.size() && budget > 0 &&
                     (int64_t)plan.scheduled.size() < config_.max_seqs_per_step;) {
    Sequence* s = running_[i];
    const int64_t n = chunk(s);
    if (n <= 0) {
      ++i;
      continue;
    }
    bool fits = ensure_blocks(*s, s->n_computed + n, plan, now);
    while (!fits && running_.back() != s) {
      preempt(*running_.back(), plan);
      fits = ensure_blocks(*s, s->n_computed + n, plan, now);
    }
    if (!fits) {
      preempt(*s, plan);  // nothing younger to take from: this one waits
      continue;
    }
    plan.scheduled.push_back({s, n, s->n_computed + n == (int64_t)s->tokens.size()});
    budget -= n;
    ++i;
  }

  // 3. Waiting sequences in arrival order while budget and blocks allow. A sequence
  //    preempted in this step is not readmitted in the same step.
  while (!waiting_.empty() && budget > 0 &&
         (int64_t)plan.scheduled.size() < config_.max_seqs_per_step) {
    Sequence* s = waiting_.front();
    if (std::find(plan.preempted.begin(), plan.preempted.end(), s) != plan.preempted.end()) break;
    const int64_t n = chunk(s);
    if (!ensure_blocks(*s, s->n_computed + n, plan, now)) break;
    waiting_.pop_front();
    s->state = SeqState::running;
    insert_by_arrival(running_, s);
    plan.scheduled.push_back({s, n, s->n_computed + n == (int64_t)s->tokens.size()});
    budget -= n;
  }
}

// The chunk from the step-time curve. Before it, S minus the step's decode rows (what a
// step holds at the cost of a decode step) was on the simulated H200 (S = 128) far below the
// efficient size: the mixed workload's mean TTFT rose from 70 to 110 ms at 5 req/s against
// FCFS; and a long prefill alone in a step took the whole budget, so on the CPU a request
// arriving behind an 8k prompt waited ~2 s for the step in flight (docs/PERF.md, "Fair
// prefill (CPU)").
int64_t automatic_long_prefill_chunk(const CostModel* cost, int64_t budget, int64_t floor) {
  floor = std::clamp<int64_t>(floor, 1, budget);
  if (cost == nullptr || cost->t_fwd_samples.empty()) return std::max(budget / 4, floor);
  const auto& samples = cost->t_fwd_samples;
  int64_t x0 = std::max<int64_t>(cost->saturation(), 1);
  int64_t x1 = budget > x0 ? budget : samples.back().first;
  if (x1 <= x0 && samples.size() >= 2) {  // S at or past the last sample: its last stretch
    x0 = samples[samples.size() - 2].first;
    x1 = samples.back().first;
  }
  const double slope = x1 > x0 ? (cost->t_fwd(x1) - cost->t_fwd(x0)) / (double)(x1 - x0) : 0.0;
  if (!(slope > 0.0)) return budget;  // flat: a chunk costs nothing over the step
  const double chunk = std::ceil(kLongChunkCostRatio * cost->t_fwd(1) / slope);
  if (!(chunk < (double)budget)) return budget;
  return std::clamp<int64_t>((int64_t)chunk, floor, budget);
}

// The fair planner (vLLM's partial prefills). With FCFS a request's first token waited for
// every older prefill to end (an 8,000-token prompt: 30 s on the CPU), and an old prefill
// held back younger decode rows too. Here:
//  a. every running sequence with one uncomputed token gets its decode row first, in arrival
//     order (decode rows keep priority: a generating request never waits behind a prompt);
//  b. the rest of the budget goes to prefills (more than one uncomputed token): running ones
//     mid-prefill, then waiting ones, each in arrival order (FCFS admission: the paper orders
//     every queue by original arrival). A prefill with more than the long chunk L left is
//     long: while another prefill shares the step it gets at most L, and the short ones get
//     all they need first. At most max_partial_prefills of them stay unfinished after the
//     step; one that finishes in it does not count (a burst of short prompts is admitted as
//     FCFS would);
//  c. a step with a short prompt in it carries no long prefill chunk when the oldest prefill
//     is long: the short prompt's first token then costs a step of its own size, not one of
//     L rows at the long prompt's context (on the CPU a 109-row chunk at 7k context is ~3 s
//     against ~30 ms for a short chat alone). The long prefills give up one step at a time:
//     the next step serves the oldest prefill first (up to L), so a stream of short prompts
//     cannot starve it.
// A long prefill gets at most L a step even alone: a request arriving meanwhile waits for the
// step in flight, and L bounds that step (automatic_long_prefill_chunk says what L costs).
// Blocks are taken in the same order as FCFS's (running oldest first, preempting the newest
// running sequence, which may be a decode row planned in a: it leaves the plan), and a waiting
// request that does not fit stops admission, as before (one held back only by the
// partial-prefill limit keeps its place in the queue while younger ones that finish pass it).
void Scheduler::plan_fair(StepPlan& plan, int64_t& budget, int64_t recompute_chunk, double now) {
  const int64_t max_seqs = config_.max_seqs_per_step;
  // Preempts the newest running sequence for `s`; false when `s` is the newest itself.
  auto preempt_newest_for = [&](const Sequence* s) {
    Sequence* victim = running_.back();
    if (victim == s) return false;
    for (auto it = plan.scheduled.begin(); it != plan.scheduled.end(); ++it)
      if (it->seq == victim) {  // a decode row of a: its token goes back to the budget
        budget += it->n_tokens;
        plan.scheduled.erase(it);
        break;
      }
    preempt(*victim, plan);
    return true;
  };

  // a. Decode rows.
  for (size_t i = 0;
       i < running_.size() && budget > 0 && (int64_t)plan.scheduled.size() < max_seqs;) {
    Sequence* s = running_[i];
    if (s->n_uncomputed() != 1) {
      ++i;
      continue;
    }
    bool fits = ensure_blocks(*s, s->n_computed + 1, plan, now);
    while (!fits && preempt_newest_for(s)) fits = ensure_blocks(*s, s->n_computed + 1, plan, now);
    if (!fits) {
      preempt(*s, plan);  // nothing younger to take from: this one waits
      continue;
    }
    plan.scheduled.push_back({s, 1, true});
    budget -= 1;
    ++i;
  }

  // b. Prefills: the candidates, then what each gets, then their blocks.
  struct Prefill {
    Sequence* seq;
    int64_t cap;  // what it may take at most: all its tokens, a recomputation its chunk
    bool waiting;
    int64_t n = 0;
  };
  const int64_t long_chunk = long_chunk_;
  auto cap_of = [&](const Sequence* s) {
    const int64_t n = s->n_uncomputed();
    // Only the part below the peak is recomputation (capped, as in FCFS); new tokens (a
    // prompt, a tool result) are ordinary prefill.
    return s->is_recomputing() ? std::min(n, std::max<int64_t>(recompute_chunk, 1)) : n;
  };
  std::vector<Prefill> cands;
  int64_t wanted = 0;  // what the candidates could take together: the scan stops past the budget
  const int64_t slots = max_seqs - (int64_t)plan.scheduled.size();
  for (Sequence* s : running_)
    if (s->n_uncomputed() > 1 && (int64_t)cands.size() < slots) {
      cands.push_back({s, cap_of(s), false});
      wanted += std::min(cands.back().cap, long_chunk);
    }
  for (Sequence* s : waiting_) {
    if ((int64_t)cands.size() >= slots || wanted >= budget) break;
    // A sequence preempted in this step is not readmitted in the same step.
    if (std::find(plan.preempted.begin(), plan.preempted.end(), s) != plan.preempted.end()) break;
    if (s->n_uncomputed() <= 0) break;
    cands.push_back({s, cap_of(s), true});
    wanted += std::min(cands.back().cap, long_chunk);
  }
  if (cands.empty()) return;
  int64_t left = budget;
  auto give = [&](Prefill& c, int64_t n) {
    n = std::min(n, left);
    c.n = n;
    left -= n;
  };
  // A short prompt waiting behind long ones gets a step without them (c above), unless they
  // gave the last one up too.
  const bool any_short = std::any_of(cands.begin(), cands.end(),
                                     [&](const Prefill& c) { return c.cap <= long_chunk; });
  const bool yield = any_short && cands[0].cap > long_chunk && !long_prefills_yielded_;
  long_prefills_yielded_ = yield;
  if (!yield) give(cands[0], std::min(cands[0].cap, long_chunk));  // the oldest advances
  for (size_t i = yield ? 0 : 1; i < cands.size(); ++i)
    if (cands[i].cap <= long_chunk) give(cands[i], cands[i].cap);  // short: all of it
  for (size_t i = 1; i < cands.size() && !yield; ++i)
    if (cands[i].cap > long_chunk) give(cands[i], long_chunk);  // long: its chunk
  // At most max_partial_prefills stay unfinished; the later ones wait (their share of the
  // budget is not handed on: the step stays short).
  int64_t partial = 0;
  for (Prefill& c : cands)
    if (c.n > 0 && c.n < c.seq->n_uncomputed() && ++partial > config_.max_partial_prefills) c.n = 0;

  bool admitting = true;
  for (size_t i = 0; i < cands.size(); ++i) {
    Prefill& c = cands[i];
    Sequence* s = c.seq;
    if (c.n <= 0) continue;
    if (!c.waiting) {
      if (s->state != SeqState::running) {  // preempted for an older one
        c.n = 0;
        continue;
      }
      bool fits = ensure_blocks(*s, s->n_computed + c.n, plan, now);
      while (!fits && preempt_newest_for(s))
        fits = ensure_blocks(*s, s->n_computed + c.n, plan, now);
      if (!fits) {
        preempt(*s, plan);
        c.n = 0;
        continue;
      }
    } else {
      if (!admitting || !ensure_blocks(*s, s->n_computed + c.n, plan, now)) {
        admitting = false;  // FCFS admission: nobody younger passes one that does not fit
        c.n = 0;
        continue;
      }
      erase_from(waiting_, s);
      s->state = SeqState::running;
      insert_by_arrival(running_, s);
    }
    budget -= c.n;
  }
  for (const Prefill& c : cands)
    if (c.n > 0) {
      Sequence* s = c.seq;
      plan.scheduled.push_back({s, c.n, s->n_computed + c.n == (int64_t)s->tokens.size()});
    }
}

StepPlan Scheduler::schedule(double now) {
  StepPlan plan;
  const int64_t bs = config_.block_size;
  // Paused requests hold device tokens over time: the preserve waste, measured.
  if (last_now_ >= 0.0) {
    const double dt = std::max(0.0, now - last_now_);
    for (Sequence* s : paused_) s->preserved_token_seconds += (double)s->device_tokens(bs) * dt;
    for (Sequence* s : resuming_) s->preserved_token_seconds += (double)s->device_tokens(bs) * dt;
  }
  last_now_ = now;

  // What can be copied while this step's forward pass runs (N_i), estimated from the last
  // step's size. Without a cost model the budget is unbounded.
  int64_t swap_budget = std::numeric_limits<int64_t>::max() / 4;
  if (cost_ != nullptr && cost_->swap_bytes_per_second > 0)
    swap_budget = std::max<int64_t>(bs, cost_->swap_budget_tokens(cost_->t_fwd(last_step_tokens_)));

  // 1. Resumed requests bring their KV back first (they are the oldest work waiting); then
  //    the policy moves or drops the KV of the requests still paused.
  swap_in_resuming(plan, swap_budget);
  apply_policy(plan, now, swap_budget);

  int64_t budget = config_.max_tokens_per_step;
  int64_t decode_tokens = 0;
  for (const Sequence* s : running_) decode_tokens += s->n_uncomputed() == 1 ? 1 : 0;
  const int64_t saturation = cost_ != nullptr ? cost_->saturation() : config_.max_tokens_per_step;
  const int64_t recompute_chunk = std::max(saturation - decode_tokens, config_.min_recompute_chunk);
  // 2. Running and waiting sequences under the token budget.
  if (config_.max_partial_prefills <= 1)
    plan_fcfs(plan, budget, recompute_chunk, now);
  else
    plan_fair(plan, budget, recompute_chunk, now);
  plan.n_tokens = config_.max_tokens_per_step - budget;
  if (plan.n_tokens > 0) last_step_tokens_ = plan.n_tokens;
  return plan;
}

void Scheduler::commit(const StepPlan& plan) {
  for (const ScheduledSeq& ss : plan.scheduled) {
    ss.seq->n_computed += ss.n_tokens;
    ss.seq->n_computed_peak = std::max(ss.seq->n_computed_peak, ss.seq->n_computed);
    ss.seq->blocks.n_tokens = ss.seq->n_computed;
    CHECK_LE(ss.seq->n_computed, (int64_t)ss.seq->tokens.size());
  }
}

void Scheduler::check_invariants() const {
  device_.check_invariants();
  if (host_ != nullptr) host_->check_invariants();
  const int64_t bs = config_.block_size;
  int64_t dev_owned = 0, host_owned = 0;
  auto count = [&](const Sequence* s) {
    dev_owned += (int64_t)s->blocks.blocks.size();
    host_owned += (int64_t)s->host_blocks.size();
    // The KV that exists is covered by the blocks that hold it.
    CHECK_LE(s->n_computed, (int64_t)(s->blocks.blocks.size() + s->host_blocks.size()) * bs);
    CHECK_LE(s->n_computed, (int64_t)s->tokens.size());
  };
  for (const Sequence* s : running_) {
    CHECK(s->state == SeqState::running);
    CHECK(s->host_blocks.empty());
    CHECK_GE((int64_t)s->blocks.blocks.size() * bs, s->n_computed);
    count(s);
  }
  for (const Sequence* s : waiting_) {
    CHECK(s->state == SeqState::waiting);
    CHECK(s->blocks.blocks.empty() && s->host_blocks.empty());
    CHECK_EQ(s->n_computed, 0);
  }
  for (const Sequence* s : paused_) {
    CHECK(s->state == SeqState::intercepted && s->interception.has_value());
    count(s);
  }
  for (const Sequence* s : resuming_) {
    CHECK(s->state == SeqState::intercepted);
    CHECK(!s->host_blocks.empty());
    count(s);
  }
  CHECK_EQ(dev_owned, (int64_t)device_.n_used());
  if (host_ != nullptr) CHECK_EQ(host_owned, (int64_t)host_->n_used());
  for (size_t i = 1; i < waiting_.size(); ++i)
    CHECK_LE(waiting_[i - 1]->arrival_time, waiting_[i]->arrival_time);
  for (size_t i = 1; i < running_.size(); ++i)
    CHECK_LE(running_[i - 1]->arrival_time, running_[i]->arrival_time);
}

int32_t longest_blocks(const StepPlan& plan) {
  int32_t most = 0;
  for (const ScheduledSeq& ss : plan.scheduled)
    most = std::max(most, (int32_t)ss.seq->blocks.blocks.size());
  return most;
}

void describe_step(const StepPlan& plan, StepShape& shape) {
  shape.query_tokens = 0;
  shape.sequences = (int64_t)plan.scheduled.size();
  shape.context_tokens = 0;
  shape.sampled_rows = 0;
  shape.chunks.clear();
  for (const ScheduledSeq& ss : plan.scheduled) {
    shape.query_tokens += ss.n_tokens;
    shape.context_tokens += ss.seq->n_computed;
    shape.sampled_rows += ss.sample ? 1 : 0;
    if (ss.n_tokens > 1) shape.chunks.push_back({ss.n_tokens, ss.seq->n_computed});
  }
}

}  // namespace infercept
