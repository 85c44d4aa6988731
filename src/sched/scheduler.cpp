#include "sched/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "sched/queues.h"

namespace infercept {

using sched_queues::by_arrival;
using sched_queues::erase_from;

Scheduler::Scheduler(const SchedulerConfig& config, BlockAllocator& device, BlockAllocator* host,
                     Policy* policy, const CostModel* cost)
    : config_(config), device_(device), host_(host), policy_(policy), cost_(cost) {
  CHECK_GT(config.block_size, 0);
  CHECK_GT(config.max_tokens_per_step, 0);
  CHECK_GT(config.max_seqs_per_step, 0);
  if (config.prefix_cache) {
    cache_ = std::make_unique<PrefixCache>(device, config.block_size);
    if (host != nullptr)
      host_cache_ = std::make_unique<PrefixCache>(*host, config.block_size, /*lower_tier=*/true);
  }
  long_chunk_ = config.long_prefill_tokens > 0
                    ? config.long_prefill_tokens
                    : automatic_long_prefill_chunk(cost, config.max_tokens_per_step,
                                                   config.min_long_prefill_chunk);
}

Scheduler::~Scheduler() {
  for (int32_t b : pinned_host_) host_->release(b);
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

void Scheduler::finish(Sequence* seq) {
  erase_from(running_, seq);
  erase_from(waiting_, seq);
  erase_from(paused_, seq);
  erase_from(resuming_, seq);
  forget_disk_copy(*seq);
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
  seq->disk_refused = false;
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
  } else if (!seq->host_blocks.empty() || seq->disk != DiskState::none) {
    seq->state = SeqState::intercepted;  // still not runnable: its KV is coming back
    insert_by_arrival(resuming_, seq);
  } else {
    seq->state = SeqState::running;
    insert_by_arrival(running_, seq);
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
    attach_cached_prefix(*s, plan);
    const int64_t n = chunk(s);
    if (!ensure_blocks(*s, s->n_computed + n, plan, now)) {
      detach_cached_prefix(*s);
      break;
    }
    count_admission(*s);
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
    // A waiting sequence takes its cached prefix only when it is admitted (below): were every
    // candidate to hold its prefix from here, those references could leave nothing to evict
    // for the oldest one, which then never fits (with a small pool, a livelock), and running
    // sequences would be preempted for requests not yet admitted. Its share is planned
    // from what the cache holds now.
    cands.push_back({s, std::max<int64_t>(cap_of(s) - cached_prefix_tokens(*s), 1), true});
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
    if (c.n > 0 && c.n < (c.waiting ? c.cap : c.seq->n_uncomputed()) &&
        ++partial > config_.max_partial_prefills)
      c.n = 0;

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
      if (!admitting) {
        c.n = 0;
        continue;
      }
      attach_cached_prefix(*s, plan);  // the hit may have shrunk (evictions) or grown (host tier)
      c.n = std::min(c.n, s->n_uncomputed());
      if (!ensure_blocks(*s, s->n_computed + c.n, plan, now)) {
        detach_cached_prefix(*s);
        admitting = false;  // FCFS admission: nobody younger passes one that does not fit
        c.n = 0;
        continue;
      }
      count_admission(*s);
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
    auto accrue = [&](Sequence* s) {
      const double held = (double)exclusive_device_tokens(*s) * dt;
      s->preserved_token_seconds += held;
      preserved_token_seconds_ += held;
    };
    std::for_each(paused_.begin(), paused_.end(), accrue);
    std::for_each(resuming_.begin(), resuming_.end(), accrue);
  }
  last_now_ = now;
  // The last step's copies are queued: the host blocks its promotions read may be reused.
  for (int32_t b : pinned_host_) host_->release(b);
  pinned_host_.clear();
  read_out_this_step_.clear();
  demoted_to_this_step_.clear();

  // What can be copied while this step's forward pass runs (N_i), estimated from the last
  // step's size. Without a cost model the budget is unbounded.
  int64_t swap_budget = std::numeric_limits<int64_t>::max() / 4;
  if (cost_ != nullptr && cost_->swap_bytes_per_second > 0)
    swap_budget = std::max<int64_t>(bs, cost_->swap_budget_tokens(cost_->t_fwd(last_step_tokens_)));

  // 1. Resumed requests bring their KV back first (they are the oldest work waiting); then
  //    the policy moves or drops the KV of the requests still paused.
  swap_in_resuming(plan, swap_budget);
  apply_policy(plan, now, swap_budget);
  // What is left moves cached blocks between the tiers (promotions, demotions).
  swap_budget_left_ = swap_budget;

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
  // Copies let go of since the last plan (and in this one) are removed after its jobs; KV
  // dropped by a failed read since the last plan is counted with this one's.
  plan.disk_drops.swap(disk_drops_);
  plan.dropped_tokens += dropped_by_disk_;
  dropped_by_disk_ = 0;
  disk_drops_.clear();
  return plan;
}

void Scheduler::disk_done(const DiskDone& done) {
  auto it = disk_copies_.find(done.copy);
  CHECK_MSG(it != disk_copies_.end() && it->second.in_flight, "a disk job that was not running");
  DiskCopy& c = it->second;
  c.in_flight = false;
  disk_in_flight_--;
  Sequence* s = c.seq;
  // drop_disk_copy below may erase the entry `c` refers to: what is needed after it is copied.
  const int64_t n_blocks = c.blocks;
  if (s == nullptr) {
    // Its request let the KV go while the job ran: the blocks the job used go back now.
    for (int32_t b : c.pinned) host_->release(b);
    disk_copies_.erase(it);
    return;
  }
  const int64_t bs = config_.block_size;
  if (s->disk == DiskState::writing) {
    host_freeing_blocks_ -= (int64_t)s->host_blocks.size();
    if (!done.ok) {
      disk_counters_.write_failures++;
      s->disk_refused = true;
    }
    const bool resumed = std::find(resuming_.begin(), resuming_.end(), s) != resuming_.end();
    if (done.ok && !resumed) {
      // On disk now: the host blocks go back to the pool.
      disk_counters_.spilled_blocks += n_blocks;
      s->n_spilled += n_blocks * bs;
      release_host_blocks(*s);
      s->disk = DiskState::on_disk;
      return;
    }
    // Failed (the KV stays on the host), or its tool answered while the write ran (the host
    // blocks are where the swap-in wants them): the copy is not needed.
    if (done.ok) disk_counters_.spills_undone++;
    s->disk = DiskState::none;
    s->disk_copy = 0;
    s->disk_blocks = 0;
    drop_disk_copy(done.copy);
    trim_host_suffix(*s);
    return;
  }
  CHECK(s->disk == DiskState::reading);
  s->disk = DiskState::none;
  s->disk_copy = 0;
  s->disk_blocks = 0;
  drop_disk_copy(done.copy);
  if (done.ok) {
    disk_counters_.restored_blocks += n_blocks;
    s->n_restored += n_blocks * bs;
    trim_host_suffix(*s);
    return;
  }
  // A read that failed (I/O error, a corrupted or vanished file): the KV is recomputed.
  disk_counters_.read_failures++;
  StepPlan ignored;
  drop_kv(*s, ignored);
  dropped_by_disk_ += ignored.dropped_tokens;
  if (std::find(resuming_.begin(), resuming_.end(), s) != resuming_.end()) {
    erase_from(resuming_, s);
    s->state = SeqState::waiting;
    insert_by_arrival(waiting_, s);
  }
}

void Scheduler::commit(const StepPlan& plan) {
  const int64_t bs = config_.block_size;
  for (const ScheduledSeq& ss : plan.scheduled) {
    // The step wrote positions [n_computed, n_computed + n_tokens): blocks nobody shares.
    for (int64_t b = ss.seq->n_computed / bs; b <= (ss.seq->n_computed + ss.n_tokens - 1) / bs; ++b)
      CHECK_MSG(!shared_block(ss.seq->blocks.blocks[(size_t)b]),
                "a step wrote into a shared block");
    ss.seq->n_computed += ss.n_tokens;
    ss.seq->n_computed_peak = std::max(ss.seq->n_computed_peak, ss.seq->n_computed);
    ss.seq->blocks.n_tokens = ss.seq->n_computed;
    CHECK_LE(ss.seq->n_computed, (int64_t)ss.seq->tokens.size());
    index_computed_blocks(*ss.seq);
  }
}

void Scheduler::check_invariants() const {
  device_.check_invariants();
  if (host_ != nullptr) host_->check_invariants();
  const int64_t bs = config_.block_size;
  // Every block's refcount is the number of sequences holding it plus the cache's index.
  std::vector<int32_t> dev_holders((size_t)device_.n_blocks(), 0);
  std::vector<int32_t> host_holders(host_ != nullptr ? (size_t)host_->n_blocks() : 0, 0);
  for (int32_t b : pinned_host_) host_holders[(size_t)b]++;
  // The disk tier: copies' blocks add up to what the budget counts, and host blocks of
  // let-go copies stay held until their jobs end.
  int64_t disk_blocks = 0, in_flight = 0;
  for (const auto& [id, c] : disk_copies_) {
    if (!c.dropped) disk_blocks += c.blocks;
    in_flight += c.in_flight ? 1 : 0;
    CHECK(c.in_flight || !c.dropped);  // a dropped copy is kept only while its job runs
    CHECK(c.seq == nullptr || (c.seq->disk != DiskState::none && c.seq->disk_copy == id));
    CHECK(c.seq != nullptr || c.pinned.empty() || c.in_flight);
    for (int32_t b : c.pinned) host_holders[(size_t)b]++;
  }
  CHECK_EQ(disk_blocks, disk_used_blocks_);
  CHECK_LE(disk_used_blocks_, config_.disk_blocks);
  CHECK_EQ(in_flight, disk_in_flight_);
  auto count = [&](const Sequence* s) {
    for (int32_t b : s->blocks.blocks) dev_holders[(size_t)b]++;
    // The blocks others hold are a prefix of its blocks (shared_device_blocks bisects).
    const int64_t shared = shared_device_blocks(*s);
    for (size_t i = 0; i < s->blocks.blocks.size(); ++i)
      CHECK_EQ(held_by_others(*s, i), (int64_t)i < shared);
    for (int32_t b : s->host_blocks) host_holders[(size_t)b]++;
    // The cached blocks it names are the ones it holds.
    CHECK_LE(s->cache_keys.size(), s->blocks.blocks.size());
    for (size_t i = 0; i < s->cache_keys.size(); ++i)
      CHECK_EQ(cache_->key_of_block(s->blocks.blocks[i]), s->cache_keys[i]);
    // The KV that exists is covered by the blocks that hold it (on disk: the copy's).
    const size_t off_device = s->on_disk() ? (size_t)s->disk_blocks : s->host_blocks.size();
    CHECK_LE(s->n_computed, (int64_t)(s->blocks.blocks.size() + off_device) * bs);
    if (s->disk != DiskState::none) {
      CHECK(s->state == SeqState::intercepted);
      const DiskCopy& c = disk_copies_.at(s->disk_copy);
      CHECK(c.seq == s && !c.dropped && c.blocks == s->disk_blocks);
      CHECK_EQ(c.in_flight, s->disk == DiskState::writing || s->disk == DiskState::reading);
      if (s->on_disk()) CHECK(s->host_blocks.empty());
      if (s->disk == DiskState::reading) CHECK_EQ((int64_t)s->host_blocks.size(), s->disk_blocks);
    }
    CHECK_LE(s->n_computed, (int64_t)s->tokens.size());
  };
  for (const Sequence* s : running_) {
    CHECK(s->state == SeqState::running);
    CHECK(s->host_blocks.empty() && s->disk == DiskState::none);
    CHECK_GE((int64_t)s->blocks.blocks.size() * bs, s->n_computed);
    count(s);
  }
  for (const Sequence* s : waiting_) {
    CHECK(s->state == SeqState::waiting);
    CHECK(s->blocks.blocks.empty() && s->host_blocks.empty() && s->disk == DiskState::none);
    CHECK_EQ(s->n_computed, 0);
  }
  for (const Sequence* s : paused_) {
    CHECK(s->state == SeqState::intercepted && s->interception.has_value());
    count(s);
  }
  for (const Sequence* s : resuming_) {
    CHECK(s->state == SeqState::intercepted);
    CHECK(!s->host_blocks.empty() || s->on_disk());
    count(s);
  }
  if (cache_ != nullptr) cache_->check_invariants();
  if (host_cache_ != nullptr) host_cache_->check_invariants();
  for (int32_t b = 0; b < device_.n_blocks(); ++b)
    CHECK_EQ(device_.refcount(b), dev_holders[(size_t)b] + (device_.is_cached(b) ? 1 : 0));
  for (size_t b = 0; b < host_holders.size(); ++b)
    CHECK_EQ(host_->refcount((int32_t)b), host_holders[b] + (host_->is_cached((int32_t)b) ? 1 : 0));
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
