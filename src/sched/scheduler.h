// The step planner: continuous batching with chunked prefill under a per-step token budget,
// preemption by recomputation when the KV cache runs out (a request never fails for lack of
// memory), and the KV of paused (intercepted) requests moved between the device and host
// tiers as the interception policy decides, under a per-step swap budget; with a disk tier,
// the host part of a paused request's KV spilled to disk and restored when it resumes.
//
// Pure logic: input is the sequences, the block allocators of both tiers, the policy and
// the clock; output is a plan (which sequences run, how many of their tokens, which blocks
// move between tiers, which KV was dropped). The engine executes the plan (copies first,
// then the forward pass) and reports back with commit().
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "kv/block_allocator.h"
#include "kv/prefix_cache.h"
#include "sched/cost_model.h"
#include "sched/policy.h"
#include "sched/sequence.h"

namespace infercept {

struct SchedulerConfig {
  int64_t block_size = 16;
  int64_t max_tokens_per_step = 512;  // token budget of one step (prefill chunks + decodes)
  int64_t max_seqs_per_step = 64;
  // Free device blocks below this fraction count as memory pressure for the policy.
  double pressure_watermark = 0.05;
  // Recomputation of dropped KV runs in chunks of at most S - R tokens per step (S the
  // saturation point, R the step's decode tokens), so nobody stalls behind it; never less
  // than this (on a CPU S is ~1: there is no idle compute to hide a chunk in).
  int64_t min_recompute_chunk = 32;
  // Fair prefill (vLLM's max_num_partial_prefills): after the step's decode rows, up to this
  // many prefills that stay unfinished share the rest of the budget, so a short prompt's
  // first token does not wait behind a long one. 1 = the FCFS planner (running sequences
  // oldest first, each taking all the budget it can; then waiting ones in arrival order).
  int64_t max_partial_prefills = 4;
  // A prefill with more tokens left than this is long: it gets at most this many a step,
  // alone in the step or not (what bounds the wait of a request arriving behind it). 0 =
  // automatic (automatic_long_prefill_chunk): from the cost model's step-time curve, or
  // without one a quarter of the budget.
  int64_t long_prefill_tokens = 0;
  // The floor of the automatic long chunk (a curve whose per-token cost is steep next to a
  // step's fixed cost would ask for a chunk of a few tokens).
  int64_t min_long_prefill_chunk = 16;
  // The prefix cache (kv/prefix_cache.h): full device blocks stay indexed by their prefix
  // and a request admitted with nothing computed starts from the longest cached prefix of
  // its tokens (all but the last, in whole blocks). Off, every request computes its prompt.
  bool prefix_cache = false;
  // The disk tier (kv/disk_tier.h) in host blocks: how many blocks of paused requests' host
  // KV its budget holds. 0 = no disk tier (nothing is ever spilled).
  int64_t disk_blocks = 0;
};

// The disk tier's moves and failures (Scheduler::disk_counters), in blocks.
struct DiskCounters {
  int64_t spilled_blocks = 0;   // written host -> disk (writes that ended well)
  int64_t restored_blocks = 0;  // read disk -> host (reads that ended well)
  int64_t write_failures = 0;   // writes that failed (the KV stayed on the host)
  int64_t read_failures = 0;    // reads that failed (the KV was dropped: recomputed)
  int64_t spills_undone = 0;    // writes that ended after their request had resumed
};

// One job of the disk tier: host blocks -> disk copy `copy` (a spill), or the copy -> host
// blocks (a restore). The blocks are in the KV's order; the job runs beside the steps and
// ends in a later one (Scheduler::disk_done).
struct DiskMove {
  uint64_t copy = 0;
  std::vector<int32_t> host_blocks;
};

// A disk job that ended: the copy it was for (a copy has at most one job at a time).
struct DiskDone {
  uint64_t copy = 0;
  bool ok = false;
};

struct PrefixCacheCounters {
  int64_t query_tokens = 0;  // tokens of admitted requests looked up
  int64_t hit_tokens = 0;    // of which found cached
  int64_t evicted_blocks = 0, demoted_blocks = 0, promoted_blocks = 0;
};

struct ScheduledSeq {
  Sequence* seq = nullptr;
  int64_t n_tokens = 0;  // query tokens this step: tokens[n_computed, n_computed + n_tokens)
  bool sample = false;   // this step reaches the end of the known tokens: sample the next one
  // Prompt rows (a prefill or recompute chunk, or a prompt's only row) rather than one decode
  // row: what EngineStats::prompt_tokens_computed counts. Read it before the step's sampled
  // token is appended.
  bool is_prompt() const { return n_tokens > 1 || seq->n_generated() == 0; }
};

// One block copy between the tiers: swap_out moves device -> host, swap_in host -> device.
struct BlockMove {
  int32_t from = 0;
  int32_t to = 0;
};

struct StepPlan {
  std::vector<ScheduledSeq> scheduled;
  std::vector<Sequence*> preempted;
  int64_t n_tokens = 0;
  int64_t dropped_tokens = 0;  // computed tokens whose KV was thrown away this step
  // Copies run before the forward pass, swap_in first: a host block freed by a swap-in may be
  // the destination of a swap-out in the same step, and device blocks freed by a swap-out
  // may be written by this step's forward pass.
  std::vector<BlockMove> swap_in;
  std::vector<BlockMove> swap_out;
  bool sync_swap = false;  // a whole-context synchronous swap (the `swap` policy) is in it
  // The disk tier's jobs, started after the step's copies: spills (host -> disk), restores
  // (disk -> host), and copies no longer needed (their files removed, after any job on them).
  std::vector<DiskMove> spill_out;
  std::vector<DiskMove> spill_in;
  std::vector<uint64_t> disk_drops;
  int64_t n_spill_decisions = 0;
  int64_t n_prefetches = 0;  // restores of paused requests' KV before their tool answered
  int64_t n_discards = 0, n_swap_decisions = 0, n_preserve_decisions = 0;
  int64_t n_swap_preemptions = 0;  // preempted sequences whose KV went to the host tier
  bool empty() const {
    return scheduled.empty() && swap_out.empty() && swap_in.empty() && spill_out.empty() &&
           spill_in.empty() && disk_drops.empty();
  }
};

// What a plan's forward pass carries, as CostModel::step_seconds prices it: its rows, the
// context its sequences held before it, its sampled rows and its chunks (the sequences
// computing more than one row). `shape` is overwritten; its chunk list keeps its capacity.
void describe_step(const StepPlan& plan, StepShape& shape);

// A chunk pays a step's fixed cost T_fwd(1) and a per-token cost above the saturation point.
// The automatic long chunk is the smallest whose fixed cost is at most 1/kLongChunkCostRatio
// of its step: smaller chunks shorten the wait of whoever arrives behind a long prompt (a
// step is not cut short once it runs), and beyond it bigger chunks buy at most ~12% prefill
// throughput.
inline constexpr double kLongChunkCostRatio = 8.0;
// ceil(kLongChunkCostRatio * T_fwd(1) / slope), slope the per-token cost of T_fwd between S
// and the budget (or the largest sample when the budget is not above S), clamped to
// [floor, budget]; a flat or falling curve (no per-token cost to pay for) gives the budget.
// Without a cost model: a quarter of the budget, not below the floor.
int64_t automatic_long_prefill_chunk(const CostModel* cost, int64_t budget, int64_t floor);

// Blocks of the plan's longest scheduled sequence (what a step's block tables must hold).
int32_t longest_blocks(const StepPlan& plan);

class Scheduler {
 public:
  // `host` may be null (no swap space); `policy` may be null (paused requests are preserved).
  Scheduler(const SchedulerConfig& config, BlockAllocator& device, BlockAllocator* host = nullptr,
            Policy* policy = nullptr, const CostModel* cost = nullptr);
  ~Scheduler();

  const SchedulerConfig& config() const { return config_; }
  // The long-prefill chunk: long_prefill_tokens, or the automatic one.
  int64_t long_prefill_chunk() const { return long_chunk_; }
  // Adds a new sequence to the waiting queue (ordered by arrival time).
  void add(Sequence* seq);
  // Removes a sequence wherever it is and frees its blocks in both tiers (finish, abort).
  void finish(Sequence* seq);
  // A running sequence stops for a tool (between steps). Its KV stays where it is until the
  // policy decides otherwise.
  void intercept(Sequence* seq, InterceptionInfo info);
  // The tool answered: `returned` tokens are appended and the sequence queues to run again
  // (straight to running when its KV is on the device; through swap-in when some is on the
  // host; through the waiting queue when it was dropped).
  void resume(Sequence* seq, const std::vector<int32_t>& returned, double now);
  // Drops the KV of a paused sequence (expiry, or the client let it go) but keeps its tokens,
  // so a late resume still works by recomputation.
  void release_paused(Sequence* seq);
  // Keeps the KV of a paused sequence's first `n_keep` positions only (the blocks past them
  // go back to their pools); its tokens are the caller's to change. Used when a new request
  // continues a paused one and their tokens part ways at n_keep.
  void truncate_paused(Sequence* seq, int64_t n_keep);

  // Plans the next step at time `now` (seconds).
  StepPlan schedule(double now);
  // Records that the plan ran: n_computed advances.
  void commit(const StepPlan& plan);
  // A disk job of an earlier plan ended (between steps). A spill that ended well frees its
  // host blocks (the KV is on disk now); one that failed leaves the KV on the host. A
  // restore that ended well leaves the KV in its host blocks, to be swapped in; one that
  // failed drops the KV (the request recomputes it, never fails).
  void disk_done(const DiskDone& done);
  const DiskCounters& disk_counters() const { return disk_counters_; }
  // Disk-tier blocks held by copies (on disk or being written or read).
  int64_t disk_used_blocks() const { return disk_used_blocks_; }
  // Disk jobs planned and not yet reported done.
  int64_t disk_jobs_in_flight() const { return disk_in_flight_; }

  size_t n_waiting() const { return waiting_.size(); }
  size_t n_running() const { return running_.size(); }
  size_t n_paused() const { return paused_.size(); }
  size_t n_resuming() const { return resuming_.size(); }
  bool has_work() const { return !waiting_.empty() || !running_.empty() || !resuming_.empty(); }
  const std::vector<Sequence*>& paused() const { return paused_; }
  // Device tokens held by paused (and resuming) requests, integrated over time at every
  // schedule(): the preserve waste in token-seconds, as it accrues.
  double preserved_token_seconds() const { return preserved_token_seconds_; }
  // Blocks the prefix cache indexes in the device and the host tier (held by requests too,
  // or idle and evictable).
  int64_t cached_device_blocks() const;
  int64_t cached_host_blocks() const;
  // The prefix cache's counters (query and hit tokens, evictions, demotions, promotions).
  const PrefixCacheCounters& prefix_counters() const { return prefix_counters_; }
  // Device tokens of a paused sequence that nobody else holds (neither another sequence nor
  // the cache's index): what preserving its KV costs.
  int64_t exclusive_device_tokens(const Sequence& s) const;
  // How many of s's device blocks, from its first, other sequences hold too.
  int64_t shared_device_blocks(const Sequence& s) const;
  // Capacity of the device cache in tokens: what a single sequence can ever hold.
  int64_t capacity_tokens() const;
  void check_invariants() const;

 private:
  // The two planners of step 2 (running and waiting sequences under the token budget);
  // `budget` is what is left of the step's tokens and is reduced by what they take.
  void plan_fcfs(StepPlan& plan, int64_t& budget, int64_t recompute_chunk, double now);
  void plan_fair(StepPlan& plan, int64_t& budget, int64_t recompute_chunk, double now);
  // Where blocks move or are dropped (kv_moves.cpp, the one place that does).
  bool ensure_blocks(Sequence& s, int64_t n_tokens_total, StepPlan& plan, double now);
  void release_device_blocks(Sequence& s);
  void release_host_blocks(Sequence& s);
  void drop_kv(Sequence& s, StepPlan& plan);
  void preempt(Sequence& s, StepPlan& plan);
  bool swap_preempt_worthwhile(const Sequence& s) const;
  void insert_by_arrival(std::deque<Sequence*>& q, Sequence* s);
  void insert_by_arrival(std::vector<Sequence*>& q, Sequence* s);
  void apply_policy(StepPlan& plan, double now, int64_t& swap_budget);
  void swap_in_resuming(StepPlan& plan, int64_t& swap_budget);
  bool free_a_paused_block(StepPlan& plan);
  bool memory_pressure() const;
  // The disk tier (kv_moves.cpp): plans the spill of a paused request's host blocks, the
  // restore of a resumed one's copy, and forgets a request's copy when its KV is dropped
  // (host blocks a job still uses are kept until it ends).
  void plan_spill(Sequence& s, StepPlan& plan);
  bool plan_restore(Sequence& s, StepPlan& plan);
  void forget_disk_copy(Sequence& s);
  void drop_disk_copy(uint64_t copy);
  // Host blocks past what n_computed needs (a truncation while a disk job ran) go back.
  void trim_host_suffix(Sequence& s);
  // The prefix cache (prefix_cache.cpp in sched/): a waiting sequence with nothing computed
  // takes the longest cached prefix of its tokens; one that is then not admitted gives it
  // back; committed full blocks are indexed; idle cached blocks are evicted for room.
  void attach_cached_prefix(Sequence& s, StepPlan& plan);
  void detach_cached_prefix(Sequence& s);
  // Tokens of a waiting sequence's prompt the device tier holds now (whole blocks, never the
  // last token): what attach_cached_prefix would take, without taking it.
  int64_t cached_prefix_tokens(const Sequence& s) const;
  void count_admission(Sequence& s);
  void index_computed_blocks(Sequence& s);
  // Evicts up to n idle cached device blocks; with `plan`, each is demoted to the host tier
  // (a copy in plan.swap_out) while the host has room and the step's swap budget allows.
  int64_t evict_cached(int64_t n, StepPlan* plan = nullptr);
  // Promotes the host-tier blocks that continue `s`'s cached prefix (copies in
  // plan.swap_in, under the swap budget), indexing them in the device tier again.
  void promote_cached(Sequence& s, StepPlan& plan, int64_t most_blocks);
  // Free blocks plus the idle cached ones eviction can free, per tier.
  int64_t available_device_blocks() const;
  int64_t available_host_blocks() const;
  bool shared_block(int32_t block) const;
  bool held_by_others(const Sequence& s, size_t i) const;
  // A device block to copy into this step (a swap-in): free, or an idle cached one evicted
  // and dropped; never one demoted this step (its copy out runs after the copies in).
  std::optional<int32_t> take_copy_destination();
  int64_t swap_in_front(Sequence& s, StepPlan& plan, int64_t& budget);
  // A host block: free, or an idle cached one evicted.
  std::optional<int32_t> take_host_block();
  // Device blocks the next request in line needs beyond the free pool (or that the pool is
  // short of its watermark); 0 without pressure.
  int64_t memory_deficit_blocks() const;
  // Free device blocks below which the pool counts as under pressure (the watermark).
  int64_t pressure_floor_blocks() const;

  SchedulerConfig config_;
  BlockAllocator& device_;
  std::unique_ptr<PrefixCache> cache_;       // config_.prefix_cache
  std::unique_ptr<PrefixCache> host_cache_;  // its host tier (with a host pool)
  PrefixCacheCounters prefix_counters_;
  int64_t swap_budget_left_ = 0;  // what this step's copies may still move
  // Device blocks this step's swap-outs read (demotions, paused KV, swap preemptions): swap-ins
  // run first in a step, so none of them may be a swap-in's destination in the same step.
  std::vector<int32_t> read_out_this_step_;
  std::vector<int32_t> demoted_to_this_step_;  // host blocks written by them
  std::vector<int32_t> pinned_host_;           // host blocks read by the last step's promotions
  BlockAllocator* host_;
  Policy* policy_;
  const CostModel* cost_;
  std::vector<Sequence*> running_;   // arrival order
  std::deque<Sequence*> waiting_;    // arrival order
  std::vector<Sequence*> paused_;    // intercepted, tool not yet answered; arrival order
  std::vector<Sequence*> resuming_;  // answered, KV partly on the host; arrival order
  // The disk tier's bookkeeping (no storage: the plan's DiskMoves are executed elsewhere).
  struct DiskCopy {
    Sequence* seq = nullptr;  // null once its request let it go (dropped KV, finished)
    int64_t blocks = 0;
    bool in_flight = false;       // a write or read is running
    bool dropped = false;         // in plan.disk_drops already; its blocks left disk_used_blocks_
    std::vector<int32_t> pinned;  // host blocks of a let-go copy that its job still uses
  };
  std::map<uint64_t, DiskCopy> disk_copies_;
  std::vector<uint64_t> disk_drops_;  // for the next plan
  uint64_t next_disk_copy_ = 1;
  int64_t disk_used_blocks_ = 0;
  int64_t disk_in_flight_ = 0;
  int64_t host_freeing_blocks_ = 0;  // host blocks spills in flight will free
  int64_t dropped_by_disk_ = 0;      // tokens failed reads dropped, for the next plan
  DiskCounters disk_counters_;
  int64_t long_chunk_ = 1;
  bool long_prefills_yielded_ = false;
  double preserved_token_seconds_ = 0.0;  // the last fair plan left its long prefills out
  int64_t last_step_tokens_ = 1;
  double last_now_ = -1.0;
};

}  // namespace infercept
