// Where KV blocks move or are dropped, in one place: a plan's copies (StepPlan::swap_in,
// swap_out) and drops (dropped_tokens, n_discards) come from these functions only. Per step,
// in this order (Scheduler::schedule):
//  1. swap_in_resuming: requests whose tool answered bring their host blocks back, under
//     the per-step swap budget N_i (or all at once for a policy that swaps synchronously);
//  2. apply_policy: the policy's keep / swap out / discard per paused request;
//  3. while planning, ensure_blocks takes blocks for the step's rows: from the free pool,
//     else from paused requests (free_a_paused_block drops the newest one's KV), else the
//     newest running request is preempted (preempt: to the host when the policy preempts by
//     swapping and that is cheaper, else dropped for recomputation).
// Outside a step: release_paused (expiry, a client letting go) and truncate_paused (a new
// request continuing a paused one keeps their common prefix).
// The disk tier's moves are planned here too: apply_policy's spills (a paused request's host
// blocks -> a disk copy) and swap_in_resuming's restores (the copy -> host blocks, then the
// ordinary swap-in); Scheduler::disk_done (scheduler.cpp) takes their ends.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "sched/queues.h"
#include "sched/scheduler.h"

namespace infercept {

using sched_queues::by_arrival;
using sched_queues::erase_from;

// From the back: a block goes idle in the cache before its parent (kv/prefix_cache.h).
void Scheduler::release_device_blocks(Sequence& s) {
  for (auto b = s.blocks.blocks.rbegin(); b != s.blocks.blocks.rend(); ++b) device_.release(*b);
  s.blocks.blocks.clear();
  s.cache_keys.clear();
  s.cache_stopped = false;
}

// The cache keys name leading device blocks only.
static void trim_cache_keys(Sequence& s) {
  if (s.cache_keys.size() > s.blocks.blocks.size()) {
    s.cache_keys.resize(s.blocks.blocks.size());
    s.cache_stopped = false;
  }
}

void Scheduler::release_host_blocks(Sequence& s) {
  for (int32_t b : s.host_blocks) host_->release(b);
  s.host_blocks.clear();
}

void Scheduler::drop_disk_copy(uint64_t copy) {
  auto it = disk_copies_.find(copy);
  CHECK(it != disk_copies_.end());
  DiskCopy& c = it->second;
  if (!c.dropped) {
    c.dropped = true;
    disk_used_blocks_ -= c.blocks;
    disk_drops_.push_back(copy);
  }
  if (!c.in_flight) disk_copies_.erase(it);
}

void Scheduler::forget_disk_copy(Sequence& s) {
  if (s.disk == DiskState::none) return;
  DiskCopy& c = disk_copies_.at(s.disk_copy);
  c.seq = nullptr;
  if (c.in_flight) {
    // The write still reads these host blocks (or the read fills them): they go back to
    // the pool when it ends, not before.
    c.pinned = std::move(s.host_blocks);
    s.host_blocks.clear();
    if (s.disk == DiskState::writing) host_freeing_blocks_ -= (int64_t)c.pinned.size();
  }
  drop_disk_copy(s.disk_copy);
  s.disk = DiskState::none;
  s.disk_copy = 0;
  s.disk_blocks = 0;
}

void Scheduler::trim_host_suffix(Sequence& s) {
  const int64_t bs = config_.block_size;
  const auto need = (size_t)BlockTable::blocks_for(s.host_tokens(bs), bs);
  while (s.host_blocks.size() > need) {
    host_->release(s.host_blocks.back());
    s.host_blocks.pop_back();
  }
}

void Scheduler::plan_spill(Sequence& s, StepPlan& plan) {
  CHECK(s.disk == DiskState::none && !s.host_blocks.empty());
  const auto n = (int64_t)s.host_blocks.size();
  if (disk_used_blocks_ + n > config_.disk_blocks) return;
  const uint64_t copy = next_disk_copy_++;
  disk_copies_[copy] = DiskCopy{&s, n, true, false, {}};
  disk_used_blocks_ += n;
  disk_in_flight_++;
  host_freeing_blocks_ += n;
  s.disk = DiskState::writing;
  s.disk_copy = copy;
  s.disk_blocks = n;
  plan.spill_out.push_back({copy, s.host_blocks});
  plan.n_spill_decisions++;
}

// Host blocks for a resumed request's disk copy, and the read into them; false while the
// host pool cannot take it (the policy sees the demand and spills others for it).
bool Scheduler::plan_restore(Sequence& s, StepPlan& plan) {
  CHECK(s.disk == DiskState::on_disk && s.host_blocks.empty());
  if (available_host_blocks() < s.disk_blocks) return false;
  for (int64_t i = 0; i < s.disk_blocks; ++i) {
    const auto hb = take_host_block();
    CHECK(hb.has_value());
    s.host_blocks.push_back(*hb);
  }
  disk_copies_.at(s.disk_copy).in_flight = true;
  disk_in_flight_++;
  s.disk = DiskState::reading;
  plan.spill_in.push_back({s.disk_copy, s.host_blocks});
  return true;
}

void Scheduler::drop_kv(Sequence& s, StepPlan& plan) {
  forget_disk_copy(s);
  release_device_blocks(s);
  if (!s.host_blocks.empty()) release_host_blocks(s);
  plan.dropped_tokens += s.n_computed;
  s.n_recomputed += s.n_computed;
  s.n_computed = 0;
  s.blocks.n_tokens = 0;
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
  int64_t keep = std::clamp<int64_t>(n_keep, 0, seq->n_computed);
  const int64_t dev_cap = (int64_t)seq->blocks.blocks.size() * bs;
  // The next token would be written into the block `keep` ends in: a block someone else
  // holds (the cache, another request) is given up instead, its first tokens recomputed.
  if (keep % bs != 0 && keep < dev_cap && shared_block(seq->blocks.blocks[(size_t)(keep / bs)]))
    keep -= keep % bs;
  if (keep <= dev_cap) {
    forget_disk_copy(*seq);
    if (!seq->host_blocks.empty()) release_host_blocks(*seq);
    const auto need = (size_t)BlockTable::blocks_for(keep, bs);
    while (seq->blocks.blocks.size() > need) {
      device_.release(seq->blocks.blocks.back());
      seq->blocks.blocks.pop_back();
    }
    trim_cache_keys(*seq);
  } else if (seq->disk == DiskState::none) {
    const auto need = (size_t)BlockTable::blocks_for(keep - dev_cap, bs);
    while (seq->host_blocks.size() > need) {
      host_->release(seq->host_blocks.back());
      seq->host_blocks.pop_back();
    }
  }
  // (On disk or with a disk job running, the copy and the job's host blocks stay whole: the
  // restore or the job's end trims what is past n_computed.)
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
// the CPU sweep and the simulator both showed it (docs/PERF.md "CPU: interception policies").
bool Scheduler::memory_pressure() const {
  return memory_deficit_blocks() > 0;
}

int64_t Scheduler::memory_deficit_blocks() const {
  const int64_t bs = config_.block_size;
  int64_t need = 0;
  if (!waiting_.empty()) {
    const Sequence* s = waiting_.front();
    // What the prefix cache holds of it is not taken from the pool (a waiting request holds
    // no blocks until admitted).
    const int64_t len = (int64_t)s->tokens.size();
    const int64_t hit =
        cache_ != nullptr ? cache_->peek(s->cache_ns, s->tokens, (len - 1) / bs, s->peek_memo) : 0;
    const int64_t tokens = s->n_computed_peak > 0
                               ? len
                               : hit * bs + std::min(len - hit * bs, config_.max_tokens_per_step);
    need += BlockTable::blocks_for(tokens, bs) - hit;
  }
  if (!resuming_.empty()) {
    const Sequence* s = resuming_.front();
    need += s->disk != DiskState::none ? s->disk_blocks : (int64_t)s->host_blocks.size();
    if (s->swap_preempted) need += (int64_t)running_.size();
  }
  const int64_t free = available_device_blocks();
  if (need > free) return need - free;
  return std::max<int64_t>(0, pressure_floor_blocks() - free);
}

int64_t Scheduler::pressure_floor_blocks() const {
  return (int64_t)std::ceil(config_.pressure_watermark * (double)device_.n_blocks());
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
  // Idle cached blocks go first (nobody's KV), then paused requests' KV.
  while (!device_.can_allocate((int32_t)need))
    if (evict_cached(need - device_.n_free(), &plan) == 0 && !free_a_paused_block(plan))
      return false;
  for (int64_t i = 0; i < need; ++i) s.blocks.blocks.push_back(*device_.allocate());
  return true;
}

// Under minwaste a preempted sequence's KV goes to the host tier when that costs less than
// recomputing it: the copy out now and back later against a prefill of its whole context.
// (Measured on the CPU sweep: recompute-only preemption was minwaste's main loss, because
// memory its swaps freed admitted new work that returning requests then preempted.)
bool Scheduler::swap_preempt_worthwhile(const Sequence& s) const {
  if (host_ == nullptr || policy_ == nullptr || !policy_->preempts_by_swapping() ||
      cost_ == nullptr || cost_->swap_bytes_per_second <= 0)
    return false;
  if (s.n_computed == 0 || !s.host_blocks.empty() || s.blocks.blocks.empty()) return false;
  if (available_host_blocks() < (int64_t)s.blocks.blocks.size()) return false;
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
      const auto hb = take_host_block();
      CHECK(hb.has_value());
      plan.swap_out.push_back({db, *hb});
      read_out_this_step_.push_back(db);
      s.host_blocks.push_back(*hb);
    }
    release_device_blocks(s);  // the copies run before anything reuses them (apply_policy)
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
  in.free_device_blocks = available_device_blocks();
  in.free_host_blocks = host_ != nullptr ? available_host_blocks() : 0;
  in.swap_budget_tokens = host_ != nullptr ? swap_budget : 0;
  in.deficit_blocks = memory_deficit_blocks();
  in.memory_pressure = in.deficit_blocks > 0;
  if (!in.memory_pressure && host_ != nullptr)
    in.spare_device_blocks =
        std::max<int64_t>(0, in.free_device_blocks - pressure_floor_blocks() - 1);
  if (config_.disk_blocks > 0) {
    in.free_disk_blocks = config_.disk_blocks - disk_used_blocks_;
    in.host_freeing_blocks = host_freeing_blocks_;
    const int64_t free_host = available_host_blocks();
    for (const Sequence* s : resuming_)
      if (s->disk == DiskState::on_disk) in.host_demand_blocks += s->disk_blocks;
    in.host_demand_blocks = std::max<int64_t>(0, in.host_demand_blocks - free_host);
  }
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
    v.device_tokens = exclusive_device_tokens(*s);
    v.host_tokens = s->disk == DiskState::none ? s->host_tokens(bs) : 0;
    v.disk_tokens = s->host_tokens(bs) - v.host_tokens;
    v.spillable = config_.disk_blocks > 0 && s->disk == DiskState::none && !s->disk_refused;
    v.on_disk = s->disk == DiskState::on_disk;
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
      case KvAction::spill:
        if (config_.disk_blocks > 0 && s.disk == DiskState::none && !s.host_blocks.empty())
          plan_spill(s, plan);
        break;
      case KvAction::prefetch:
        // Before the tool answers: from disk into host blocks (the resume then finds it on
        // the host), or from the host back to the device under the swap budget.
        if (s.disk == DiskState::on_disk) {
          if (plan_restore(s, plan)) plan.n_prefetches++;
        } else if (s.disk == DiskState::none && !s.host_blocks.empty() && host_ != nullptr &&
                   !policy_->swaps_synchronously()) {
          if (swap_in_front(s, plan, swap_budget) > 0) plan.n_prefetches++;
        }
        break;
      case KvAction::swap_out: {
        // (the host suffix of a request with a disk copy is not in host blocks to append to)
        if (host_ == nullptr || d.swap_out_tokens <= 0 || s.disk != DiskState::none) break;
        plan.n_swap_decisions++;
        const bool sync = policy_->swaps_synchronously();
        plan.sync_swap = plan.sync_swap || sync;
        // Whole blocks from the back of the device table to the front of the host suffix.
        int64_t blocks = BlockTable::blocks_for(d.swap_out_tokens, bs);
        blocks = std::min<int64_t>(blocks, (int64_t)s.blocks.blocks.size());
        std::vector<int32_t> moved;
        for (int64_t b = 0; b < blocks; ++b) {
          auto hb = take_host_block();
          if (!hb) break;
          const int32_t db = s.blocks.blocks.back();
          s.blocks.blocks.pop_back();
          plan.swap_out.push_back({db, *hb});
          read_out_this_step_.push_back(db);
          moved.push_back(*hb);
          device_.release(db);  // the copy runs before anything reuses it this step
        }
        trim_cache_keys(s);
        std::reverse(moved.begin(), moved.end());
        s.host_blocks.insert(s.host_blocks.begin(), moved.begin(), moved.end());
        s.n_swapped_out += (int64_t)moved.size() * bs;  // whole blocks move
        if (!sync) swap_budget = std::max<int64_t>(0, swap_budget - (int64_t)moved.size() * bs);
        break;
      }
    }
  }
}

// From the front of the host suffix to the device, block by block, while `budget` (tokens)
// and device blocks allow; returns the blocks moved.
int64_t Scheduler::swap_in_front(Sequence& s, StepPlan& plan, int64_t& budget) {
  const int64_t bs = config_.block_size;
  int64_t moved = 0;
  while (!s.host_blocks.empty() && budget >= bs && available_device_blocks() > 0) {
    // (none when every free block is read by a swap-out of this step)
    const auto db = take_copy_destination();
    if (!db) break;
    const int32_t hb = s.host_blocks.front();
    s.host_blocks.erase(s.host_blocks.begin());
    plan.swap_in.push_back({hb, *db});
    s.blocks.blocks.push_back(*db);
    host_->release(hb);  // the copy runs before the host block is reused (next step)
    s.n_swapped_in += bs;
    budget -= bs;
    ++moved;
  }
  return moved;
}

void Scheduler::swap_in_resuming(StepPlan& plan, int64_t& swap_budget) {
  const bool sync = policy_ != nullptr && policy_->swaps_synchronously();
  for (size_t i = 0; i < resuming_.size();) {
    Sequence& s = *resuming_[i];
    // A copy on disk comes back into host blocks first (the read ends in a later step); while
    // a write or read of its KV runs, it waits.
    if (s.disk == DiskState::on_disk) plan_restore(s, plan);
    if (s.disk != DiskState::none) {
      ++i;
      continue;
    }
    // A sequence preempted by swapping comes back only whole and with a block of headroom
    // per running sequence: partly back it would hold blocks without running, and the
    // running ones would preempt it again at once (swap ping-pong).
    if (s.swap_preempted &&
        available_device_blocks() < (int64_t)s.host_blocks.size() + (int64_t)running_.size()) {
      ++i;
      continue;
    }
    if (sync) {
      int64_t unlimited = std::numeric_limits<int64_t>::max();
      if (swap_in_front(s, plan, unlimited) > 0) plan.sync_swap = true;
    } else {
      swap_in_front(s, plan, swap_budget);
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

}  // namespace infercept
