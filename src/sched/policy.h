// Interception policies: for every paused request, every step, what happens to its KV cache.
// Pure logic: the input is a snapshot the scheduler builds, the output a decision it applies.
//
//   discard           free it at the pause; on resume the request rejoins the queue as a new
//                     request (arrival = resume time) and prefills everything (vLLM)
//   improved-discard  the same, but the request keeps its original arrival time
//   preserve          keep it on the device for the whole pause
//   swap              copy all of it to the host at once at the pause (synchronously, not
//                     budgeted) and all of it back at the resume
//   ttl               keep it on the device for a TTL (the tool's p95 duration when known),
//                     then discard (Continuum-style)
//   minwaste          InferCept: min(W_p, W_cd) per request, most wasteful first get the
//                     per-step swap-out budget, the rest preserved or discarded, whichever
//                     wastes less; re-decided every step. With a disk tier, a paused request
//                     whose KV is on the host is spilled to disk when others need host blocks
//                     and its spill waste (W_sp) is below what they would waste without them,
//                     and read back into free host blocks (prefetched) once its tool is
//                     expected back within twice the read's time; likewise host KV is
//                     swapped back in ahead of the resume into spare device blocks
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "sched/cost_model.h"
#include "sched/duration_estimator.h"

namespace infercept {

enum class PolicyKind { discard, improved_discard, preserve, swap, ttl, minwaste };
Result<PolicyKind> parse_policy(const std::string& name);
const char* policy_name(PolicyKind k);

// One paused request as the policy sees it.
struct PausedView {
  uint64_t id = 0;
  std::string tool;
  int64_t context_tokens = 0;  // tokens whose KV exists (device + host)
  int64_t device_tokens = 0;   // of which on the device (a prefix)
  int64_t host_tokens = 0;     // of which in host blocks (the suffix)
  int64_t disk_tokens = 0;     // of which on disk, or on their way there or back
  // Its host blocks may be spilled now: a disk tier exists and no disk job is running on it.
  bool spillable = false;
  // Its KV off the device is all on disk with no job running: a prefetch may read it back.
  bool on_disk = false;
  double elapsed = 0;          // seconds since the call
  std::optional<double> hint;  // expected duration given by the client, if any
};

struct PolicyInput {
  std::vector<PausedView> paused;
  int64_t running_context_tokens = 0;  // C_batch of the running requests
  int64_t decode_tokens = 0;           // R
  int64_t block_size = 16;
  int64_t free_device_blocks = 0;
  int64_t free_host_blocks = 0;
  // Tokens the policy may swap out this step: N_i less what the scheduler already planned
  // to swap in (budgeted policies spend all of it on swap-out, most wasteful first).
  int64_t swap_budget_tokens = 0;
  // True when the request next in line for device blocks cannot get them from the free
  // pool (or the pool is nearly full): keeping KV of paused requests then costs the others.
  // Without pressure preserve is free. (Scheduler::memory_pressure() says what counts.)
  bool memory_pressure = false;
  // How many device blocks that next request lacks (Scheduler::memory_deficit_blocks()).
  int64_t deficit_blocks = 0;
  // The disk tier (0 without one): blocks its budget still takes; host blocks resumed
  // requests wait for to restore their KV from disk; host blocks spills in flight will free.
  int64_t free_disk_blocks = 0;
  int64_t host_demand_blocks = 0;
  int64_t host_freeing_blocks = 0;
  // Device blocks a swap-in ahead of a resume may take and leave the pool above the pressure
  // watermark with the next request's need met (0 under pressure).
  int64_t spare_device_blocks = 0;
};

// spill: the request's host blocks go to the disk tier (freed once the write has ended).
// prefetch: its KV comes a tier closer before its tool answers: from disk into host blocks
// (so the resume waits for a swap-in only), or from the host back to the device under the
// step's swap budget (so the resume waits for nothing).
enum class KvAction { preserve, swap_out, discard, spill, prefetch };

struct PausedDecision {
  uint64_t id = 0;
  KvAction action = KvAction::preserve;
  int64_t swap_out_tokens = 0;  // for swap_out: how many tokens (whole blocks) to move now
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual PolicyKind kind() const = 0;
  // One decision per paused request, in the same order. Never exceeds the swap budget (for
  // the budgeted policies) or the free host blocks.
  virtual std::vector<PausedDecision> decide(const PolicyInput& in) = 0;
  // Whether a resumed request keeps its original arrival time in the queues.
  virtual bool keeps_arrival_on_resume() const = 0;
  // Whether its swaps (out and back in) are one synchronous copy of the whole context that
  // the step waits for (the paper's naive `swap`), not copies hidden under the forward pass.
  virtual bool swaps_synchronously() const { return false; }
  // Whether a running request preempted for lack of blocks has its KV copied to the host
  // when that costs less than recomputing it (minwaste), instead of always dropped.
  virtual bool preempts_by_swapping() const { return false; }
};

// Knobs of the policies that have any; the defaults are what `serve` uses without flags.
struct PolicyOptions {
  // ttl: keep the KV on the device for this quantile of the tool's observed durations ...
  double ttl_quantile = 0.95;
  // ... or for this long while the tool has too few observations to have a distribution.
  double ttl_default_seconds = 1.0;
  // minwaste: discard (the cheaper choice than preserving for a long pause) only as many
  // blocks as the request next in line lacks, most wasteful first, and preserve the rest.
  // The idea: memory held by a pause wastes nothing while nobody waits for it, and what is
  // discarded beyond the need is taken by new admissions at once, leaving no paused memory
  // to reclaim when the running requests grow. On by default since the H200 A/B of
  // 2026-12-01 (7B, one device call, same requests: chat-only at
  // 4 req/s 6.51 -> 6.26 ms/token, below ttl's 6.35; mixed at 4 req/s 18.0 -> 14.9).
  // false restores the paper's rule (every pause whose discard is cheaper is discarded).
  bool minwaste_discard_to_deficit = true;
};

// The policy keeps references to `cost` and `estimator`: both must outlive it. The estimator
// is read on every decide(), so what it learns from finished calls is used at once.
std::unique_ptr<Policy> make_policy(PolicyKind kind, const CostModel& cost,
                                    const DurationEstimator& estimator,
                                    const PolicyOptions& options = {});

}  // namespace infercept
