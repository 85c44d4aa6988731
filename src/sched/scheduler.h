// The step planner: continuous batching with chunked prefill under a per-step token budget,
// and preemption by recomputation when the KV cache runs out (a request never fails for lack
// of memory: it gives its blocks back and is prefilled again later).
//
// Pure logic: input is the sequences and the block allocator; output is a plan (which
// sequences run, how many of their tokens, which were preempted). The engine executes the
// plan and then reports back with commit().
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "kv/block_allocator.h"
#include "sched/sequence.h"

namespace infercept {

struct SchedulerConfig {
  int64_t block_size = 16;
  int64_t max_tokens_per_step = 512;  // token budget of one step (prefill chunks + decodes)
  int64_t max_seqs_per_step = 64;
};

struct ScheduledSeq {
  Sequence* seq = nullptr;
  int64_t n_tokens = 0;  // query tokens this step: tokens[n_computed, n_computed + n_tokens)
  bool sample = false;   // this step reaches the end of the known tokens: sample the next one
};

struct StepPlan {
  std::vector<ScheduledSeq> scheduled;
  std::vector<Sequence*> preempted;
  int64_t n_tokens = 0;
  int64_t dropped_tokens = 0;  // computed tokens whose KV the preemptions threw away
  bool empty() const { return scheduled.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, BlockAllocator& allocator);

  const SchedulerConfig& config() const { return config_; }
  // Adds a new sequence to the waiting queue (ordered by arrival time).
  void add(Sequence* seq);
  // Removes a sequence wherever it is and frees its blocks (finish, abort).
  void finish(Sequence* seq);

  // Plans the next step. Running sequences keep their place; waiting ones are admitted in
  // arrival order while the budget and the cache allow.
  StepPlan schedule();
  // Records that the plan ran: n_computed advances. Sampled tokens are appended by the
  // engine before the next schedule().
  void commit(const StepPlan& plan);

  size_t n_waiting() const { return waiting_.size(); }
  size_t n_running() const { return running_.size(); }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  // Capacity of the cache in tokens: what a single sequence can ever hold.
  int64_t capacity_tokens() const;
  void check_invariants() const;

 private:
  bool ensure_blocks(Sequence& s, int64_t n_tokens_total);
  void release_blocks(Sequence& s);
  void preempt(Sequence& s, StepPlan& plan);
  void insert_waiting(Sequence* s);

  SchedulerConfig config_;
  BlockAllocator& allocator_;
  std::vector<Sequence*> running_;  // arrival order
  std::deque<Sequence*> waiting_;   // arrival order
};

}  // namespace infercept
