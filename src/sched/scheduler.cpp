#include "sched/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace infercept {

Scheduler::Scheduler(const SchedulerConfig& config, BlockAllocator& allocator)
    : config_(config), allocator_(allocator) {
  CHECK_GT(config.block_size, 0);
  CHECK_GT(config.max_tokens_per_step, 0);
  CHECK_GT(config.max_seqs_per_step, 0);
}

int64_t Scheduler::capacity_tokens() const {
  return (int64_t)allocator_.n_blocks() * config_.block_size;
}

void Scheduler::insert_waiting(Sequence* s) {
  auto it = std::upper_bound(waiting_.begin(), waiting_.end(), s, [](Sequence* a, Sequence* b) {
    return a->arrival_time < b->arrival_time;
  });
  waiting_.insert(it, s);
}

void Scheduler::add(Sequence* seq) {
  CHECK(seq->state == SeqState::waiting && seq->blocks.blocks.empty());
  insert_waiting(seq);
}

void Scheduler::release_blocks(Sequence& s) {
  for (int32_t b : s.blocks.blocks) allocator_.release(b);
  s.blocks.blocks.clear();
  s.blocks.n_tokens = 0;
}

void Scheduler::finish(Sequence* seq) {
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
  release_blocks(*seq);
  seq->state = SeqState::finished;
}

bool Scheduler::ensure_blocks(Sequence& s, int64_t n_tokens_total) {
  const int64_t need = BlockTable::blocks_for(n_tokens_total, config_.block_size) -
                       (int64_t)s.blocks.blocks.size();
  if (need <= 0) return true;
  if (!allocator_.can_allocate((int32_t)need)) return false;
  for (int64_t i = 0; i < need; ++i) s.blocks.blocks.push_back(*allocator_.allocate());
  return true;
}

void Scheduler::preempt(Sequence& s, StepPlan& plan) {
  // Recompute-style preemption: the KV is dropped and the whole context (prompt and what was
  // generated so far) is prefilled again when the sequence is readmitted.
  release_blocks(s);
  plan.dropped_tokens += s.n_computed;
  s.n_recomputed += s.n_computed;
  s.n_computed = 0;
  s.n_preemptions++;
  s.state = SeqState::waiting;
  running_.erase(std::remove(running_.begin(), running_.end(), &s), running_.end());
  insert_waiting(&s);
  plan.preempted.push_back(&s);
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int64_t budget = config_.max_tokens_per_step;

  // 1. Running sequences, oldest first. When the cache is full, the newest running sequence
  //    is preempted to make room for older ones.
  for (size_t i = 0; i < running_.size() && budget > 0 &&
                     (int64_t)plan.scheduled.size() < config_.max_seqs_per_step;) {
    Sequence* s = running_[i];
    const int64_t n = std::min(s->n_uncomputed(), budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    bool fits = ensure_blocks(*s, s->n_computed + n);
    while (!fits && running_.back() != s) {
      preempt(*running_.back(), plan);
      fits = ensure_blocks(*s, s->n_computed + n);
    }
    if (!fits) {
      preempt(*s, plan);  // nothing younger to take from: this one waits
      continue;
    }
    plan.scheduled.push_back({s, n, s->n_computed + n == (int64_t)s->tokens.size()});
    budget -= n;
    ++i;
  }

  // 2. Waiting sequences in arrival order, as long as budget and blocks allow. A preempted
  //    sequence is not readmitted in the same step it was preempted in.
  while (!waiting_.empty() && budget > 0 &&
         (int64_t)plan.scheduled.size() < config_.max_seqs_per_step) {
    Sequence* s = waiting_.front();
    if (std::find(plan.preempted.begin(), plan.preempted.end(), s) != plan.preempted.end()) break;
    const int64_t n = std::min(s->n_uncomputed(), budget);
    if (!ensure_blocks(*s, s->n_computed + n)) break;
    waiting_.pop_front();
    s->state = SeqState::running;
    running_.push_back(s);
    plan.scheduled.push_back({s, n, s->n_computed + n == (int64_t)s->tokens.size()});
    budget -= n;
  }
  // Keep running_ in arrival order (a readmitted old sequence goes before younger ones).
  std::stable_sort(running_.begin(), running_.end(),
                   [](Sequence* a, Sequence* b) { return a->arrival_time < b->arrival_time; });
  plan.n_tokens = config_.max_tokens_per_step - budget;
  return plan;
}

void Scheduler::commit(const StepPlan& plan) {
  for (const ScheduledSeq& ss : plan.scheduled) {
    ss.seq->n_computed += ss.n_tokens;
    ss.seq->blocks.n_tokens = ss.seq->n_computed;
    CHECK_LE(ss.seq->n_computed, (int64_t)ss.seq->tokens.size());
  }
}

void Scheduler::check_invariants() const {
  allocator_.check_invariants();
  int64_t owned = 0;
  for (const Sequence* s : running_) {
    CHECK(s->state == SeqState::running);
    CHECK_GE((int64_t)s->blocks.blocks.size() * config_.block_size, s->n_computed);
    owned += (int64_t)s->blocks.blocks.size();
  }
  for (const Sequence* s : waiting_) {
    CHECK(s->state == SeqState::waiting);
    CHECK(s->blocks.blocks.empty());
    CHECK_EQ(s->n_computed, 0);
  }
  CHECK_EQ(owned, (int64_t)allocator_.n_used());
  for (size_t i = 1; i < waiting_.size(); ++i)
    CHECK_LE(waiting_[i - 1]->arrival_time, waiting_[i]->arrival_time);
}

}  // namespace infercept
