// The six interception policies. Each decide() is a pure function of its input snapshot and
// of what the estimator has learned so far; the scheduler applies the decisions.
#include "sched/policy.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/check.h"
#include "core/log.h"
#include "sched/waste.h"

namespace infercept {

Result<PolicyKind> parse_policy(const std::string& name) {
  if (name == "discard") return PolicyKind::discard;
  if (name == "improved-discard" || name == "improved_discard") return PolicyKind::improved_discard;
  if (name == "preserve") return PolicyKind::preserve;
  if (name == "swap") return PolicyKind::swap;
  if (name == "ttl") return PolicyKind::ttl;
  if (name == "minwaste") return PolicyKind::minwaste;
  return make_error(
      "unknown policy '", name,
      "' (expected one of: minwaste, discard, improved-discard, preserve, swap, ttl)");
}

const char* policy_name(PolicyKind k) {
  switch (k) {
    case PolicyKind::discard:
      return "discard";
    case PolicyKind::improved_discard:
      return "improved-discard";
    case PolicyKind::preserve:
      return "preserve";
    case PolicyKind::swap:
      return "swap";
    case PolicyKind::ttl:
      return "ttl";
    case PolicyKind::minwaste:
      return "minwaste";
  }
  return "?";
}

namespace {

std::vector<PausedDecision> all(const PolicyInput& in, KvAction action) {
  std::vector<PausedDecision> out;
  out.reserve(in.paused.size());
  for (const PausedView& p : in.paused) out.push_back({p.id, action, 0});
  return out;
}

// The device part of a paused request, clamped so a slightly inconsistent snapshot cannot
// produce a negative or oversized move.
int64_t device_part(const PausedView& p) {
  return std::clamp<int64_t>(p.device_tokens, 0, std::max<int64_t>(0, p.context_tokens));
}

int64_t blocks_for(int64_t tokens, int64_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

// How much of a request's device part fits in `token_budget` tokens and `host_blocks` free
// host blocks. Blocks leave from the back of the block table: the first to go is the last
// (possibly partial) block, then whole blocks, so the device part stays a prefix and every
// move is whole blocks except that one partial block. The copy engine moves whole blocks,
// so each block, the partial one included, is charged block_size tokens of the budget.
struct Move {
  int64_t tokens = 0;  // KV tokens that leave the device
  int64_t blocks = 0;  // host blocks they take, and block_size * blocks of budget
};
Move fit_swap_out(int64_t device_tokens, int64_t block_size, int64_t token_budget,
                  int64_t host_blocks) {
  if (device_tokens <= 0 || token_budget <= 0 || host_blocks <= 0) return {};
  const int64_t dev_blocks = blocks_for(device_tokens, block_size);
  const int64_t k = std::min({dev_blocks, host_blocks, token_budget / block_size});
  if (k == 0) return {};
  const int64_t last = device_tokens - (dev_blocks - 1) * block_size;  // 1..block_size
  return {last + (k - 1) * block_size, k};
}

class FixedPolicy final : public Policy {
 public:
  FixedPolicy(PolicyKind kind, KvAction action) : kind_(kind), action_(action) {}
  PolicyKind kind() const override { return kind_; }
  std::vector<PausedDecision> decide(const PolicyInput& in) override { return all(in, action_); }
  // vLLM treats a resumed request as new; every other policy keeps its place in line.
  bool keeps_arrival_on_resume() const override { return kind_ != PolicyKind::discard; }

 private:
  PolicyKind kind_;
  KvAction action_;
};

// Naive swap: the whole device part goes to the host at the pause, in one synchronous copy
// the scheduler charges as a stall. Not budgeted, but host blocks are finite: a request the
// host cannot take whole is discarded (half a synchronous swap would be the worst of both).
class SwapPolicy final : public Policy {
 public:
  PolicyKind kind() const override { return PolicyKind::swap; }
  bool keeps_arrival_on_resume() const override { return true; }
  bool swaps_synchronously() const override { return true; }
  std::vector<PausedDecision> decide(const PolicyInput& in) override {
    CHECK_GT(in.block_size, 0);
    std::vector<PausedDecision> out;
    out.reserve(in.paused.size());
    int64_t host_blocks = std::max<int64_t>(0, in.free_host_blocks);
    for (const PausedView& p : in.paused) {
      const int64_t dev = device_part(p);
      if (dev == 0) {
        out.push_back({p.id, KvAction::preserve, 0});  // already all on the host
        continue;
      }
      const int64_t need = blocks_for(dev, in.block_size);
      if (need <= host_blocks) {
        host_blocks -= need;
        out.push_back({p.id, KvAction::swap_out, dev});
      } else {
        out.push_back({p.id, KvAction::discard, 0});
      }
    }
    return out;
  }
};

// Continuum-style: keep the KV while the call is younger than a TTL drawn from the tool's
// duration distribution (most calls return within it), then give the memory back. Without
// memory pressure nobody needs the blocks, so there is no reason to release them.
class TtlPolicy final : public Policy {
 public:
  TtlPolicy(const DurationEstimator& estimator, const PolicyOptions& options)
      : estimator_(estimator), options_(options) {}
  PolicyKind kind() const override { return PolicyKind::ttl; }
  bool keeps_arrival_on_resume() const override { return true; }
  std::vector<PausedDecision> decide(const PolicyInput& in) override {
    if (!in.memory_pressure) return all(in, KvAction::preserve);
    std::vector<PausedDecision> out;
    out.reserve(in.paused.size());
    for (const PausedView& p : in.paused) {
      const double ttl =
          estimator_.quantile(p.tool, options_.ttl_quantile).value_or(options_.ttl_default_seconds);
      out.push_back({p.id, p.elapsed < ttl ? KvAction::preserve : KvAction::discard, 0});
    }
    return out;
  }

 private:
  const DurationEstimator& estimator_;
  PolicyOptions options_;
};

// InferCept. Under memory pressure, each paused request's cheaper alternative to swapping,
// min(W_p, W_cd), measures how much it costs the others if it is not swapped; the swap-out
// budget (hidden under the forward pass, so free) goes to the costliest first, and everyone
// else takes the cheaper of preserve and chunked discard (with the experimental option,
// discards only until the blocks they free cover what the request next in line lacks). Decided
// afresh every step, so a request preserved at the start of a pause is swapped or discarded once
// its estimated remaining time grows, and a request partly on the host simply keeps receiving
// budget in later steps (its device part is still a prefix, and what is on the host stays there).
class MinWastePolicy final : public Policy {
 public:
  MinWastePolicy(const CostModel& cost, const DurationEstimator& estimator,
                 const PolicyOptions& options)
      : cost_(cost), estimator_(estimator), options_(options) {}
  PolicyKind kind() const override { return PolicyKind::minwaste; }
  bool keeps_arrival_on_resume() const override { return true; }
  bool preempts_by_swapping() const override { return true; }

  std::vector<PausedDecision> decide(const PolicyInput& in) override {
    // Without pressure preserve is free: nothing waits for the blocks a paused request
    // holds, so keeping them costs nobody anything, while discarding costs a recompute and
    // swapping costs bandwidth later. The paper's testbed is always under pressure, which
    // is why its waste model has no such case.
    if (!in.memory_pressure) {
      std::vector<PausedDecision> out = all(in, KvAction::preserve);
      // Resumed requests waiting for host blocks to restore their KV from disk are the only
      // demand there is.
      if (in.host_demand_blocks > 0) spill_for(in, in.host_demand_blocks, kInf, out);
      prefetch(in, std::max<int64_t>(0, in.free_host_blocks), out);
      swap_in_ahead(in, out);
      return out;
    }
    CHECK_GT(in.block_size, 0);

    const int64_t running = std::max<int64_t>(0, in.running_context_tokens);
    cands_.clear();
    cands_.reserve(in.paused.size());
    for (size_t i = 0; i < in.paused.size(); ++i) {
      const PausedView& p = in.paused[i];
      Cand c;
      c.index = i;
      c.device = device_part(p);
      c.t_int = estimator_.expected_remaining(p.tool, p.elapsed, p.hint);
      WasteInputs wi;
      wi.context_tokens = std::max<int64_t>(0, p.context_tokens);
      wi.expected_remaining = c.t_int;
      wi.other_tokens = running;
      wi.batch_tokens = running + wi.context_tokens;
      wi.decode_tokens = in.decode_tokens;
      const Waste w = compute_waste(cost_, wi);
      // Preserving holds only the device part; a discard recomputes the whole context
      // (host part included). With nothing on the host both equal the paper's terms.
      const double t_int = c.t_int > 0.0 ? c.t_int : 0.0;
      c.preserve = c.device > 0 ? t_int * (double)c.device * cost_.kv_bytes_per_token : 0.0;
      c.discard = w.discard_chunked;
      c.key = std::min(c.preserve, c.discard);
      cands_.push_back(c);
    }
    // Most wasteful first; ties keep the input order (the scheduler passes it FCFS), so the
    // same snapshot always gives the same decisions.
    std::stable_sort(cands_.begin(), cands_.end(),
                     [](const Cand& a, const Cand& b) { return a.key > b.key; });

    std::vector<PausedDecision> out(in.paused.size());
    int64_t token_budget = std::max<int64_t>(0, in.swap_budget_tokens);
    int64_t host_blocks = std::max<int64_t>(0, in.free_host_blocks);
    // Device blocks that discarding may still release this step: no limit (the paper's
    // rule), or with the option the deficit of the request next in line.
    int64_t to_release = options_.minwaste_discard_to_deficit
                             ? std::max<int64_t>(0, in.deficit_blocks)
                             : std::numeric_limits<int64_t>::max();
    int64_t unmet_blocks = 0;  // host blocks swap-worthy requests wanted and did not get
    double unmet_key = 0.0;    // the most any of them wastes without them
    for (const Cand& c : cands_) {
      const PausedView& p = in.paused[c.index];
      PausedDecision& d = out[c.index];
      d.id = p.id;
      if (c.device == 0) {
        d.action = KvAction::preserve;  // all on the host already: holds no device memory
        continue;
      }
      if (worth_swapping(c)) {
        const Move m = fit_swap_out(c.device, in.block_size, token_budget, host_blocks);
        // What the host could not take while the budget could: demand a spill may meet.
        const int64_t want =
            std::min(blocks_for(c.device, in.block_size), token_budget / in.block_size) - m.blocks;
        if (want > 0) {
          unmet_blocks += want;
          unmet_key = std::max(unmet_key, c.key);
        }
        if (m.tokens > 0) {
          token_budget -= m.blocks * in.block_size;
          host_blocks -= m.blocks;
          d.action = KvAction::swap_out;
          d.swap_out_tokens = m.tokens;
          continue;
        }
      }
      const bool discard = c.discard < c.preserve && to_release > 0;
      d.action = discard ? KvAction::discard : KvAction::preserve;
      if (discard) to_release -= blocks_for(c.device, in.block_size);
    }
    // The disk tier: host KV of long pauses makes room for what the host could not take.
    // A resumed request waiting to restore from disk outweighs any paused one.
    if (in.host_demand_blocks > 0) {
      unmet_blocks += in.host_demand_blocks;
      unmet_key = kInf;
    }
    if (unmet_blocks > 0) spill_for(in, unmet_blocks, unmet_key, out);
    // Host blocks nobody wanted this step may bring back KV from disk whose tool is due:
    // only when no demand went unmet (else the read would take what a spill just freed).
    else
      prefetch(in, host_blocks, out);
    return out;
  }

 private:
  struct Cand {
    size_t index = 0;
    int64_t device = 0;
    double t_int = 0, preserve = 0, discard = 0, key = 0;
  };

  // The budget is free bandwidth, but a swapped request cannot resume before its KV is
  // back. A pause shorter than the copy out and back (a calculator call: ~0.1 ms against
  // ~10 ms for a 1k-token 7B context) would only delay the resume and spend budget that a
  // long pause could use; such a request stays with preserve or discard.
  bool worth_swapping(const Cand& c) const { return c.t_int > 2.0 * cost_.t_swap(c.device); }

  static constexpr double kInf = std::numeric_limits<double>::infinity();

  // Spills paused requests whose KV is all on the host (decided preserve so far) until `unmet` host
  // blocks, less those spills in flight will free, are covered: the cheapest spill first (W_sp of
  // its host part, waste.h), each only while its W_sp is below `benefit` (what the request
  // wanting the blocks wastes without them) and its write is expected to end before its tool
  // returns (else the blocks would not be free in time, and it would wait for the write).
  void spill_for(const PolicyInput& in, int64_t unmet, double benefit,
                 std::vector<PausedDecision>& out) {
    unmet -= std::max<int64_t>(0, in.host_freeing_blocks);
    int64_t disk = std::max<int64_t>(0, in.free_disk_blocks);
    if (unmet <= 0 || disk <= 0) return;
    spills_.clear();
    for (size_t i = 0; i < in.paused.size(); ++i) {
      const PausedView& p = in.paused[i];
      // Only KV wholly off the device: a device part left beside a disk copy could later
      // leave only by a discard.
      if (!p.spillable || p.host_tokens <= 0 || device_part(p) > 0) continue;
      if (out[i].action != KvAction::preserve) continue;
      const double t_int = estimator_.expected_remaining(p.tool, p.elapsed, p.hint);
      if (!(t_int > cost_.t_disk_write(p.host_tokens))) continue;
      // One that a prefetch would read back at once stays (no write-read ping-pong).
      if (t_int <= disk_window(p.host_tokens)) continue;
      WasteInputs wi;
      wi.context_tokens = p.host_tokens;
      wi.expected_remaining = t_int;
      const double w = compute_waste(cost_, wi).spill;
      if (!(w < benefit)) continue;
      spills_.push_back({i, w});
    }
    std::stable_sort(spills_.begin(), spills_.end(),
                     [](const Ranked& a, const Ranked& b) { return a.key < b.key; });
    for (const Ranked& sp : spills_) {
      if (unmet <= 0) break;
      const PausedView& p = in.paused[sp.index];
      const int64_t blocks = blocks_for(p.host_tokens, in.block_size);
      if (blocks > disk) continue;
      out[sp.index].id = p.id;
      out[sp.index].action = KvAction::spill;
      disk -= blocks;
      unmet -= blocks;
    }
  }
  // A paused request and what it is ranked by (a spill's waste, a prefetch's expected
  // remaining seconds): lowest first.
  struct Ranked {
    size_t index = 0;
    double key = 0;
  };

  // A tool expected back within twice the time its KV takes to read from disk: reading it
  // now hides the read behind the rest of the pause (the factor covers the estimate's error
  // and the steps the read shares with others).
  double disk_window(int64_t tokens) const { return 2.0 * cost_.t_disk_read(tokens); }

  // Without pressure, host KV of requests whose tool is expected back within twice the time
  // of its swap-in comes back into spare device blocks ahead of the resume (soonest first,
  // whole requests only), under the step's swap budget (the scheduler moves what the budget
  // allows and the decision is renewed next step). Under pressure the blocks are wanted by
  // others and nothing is brought in: the same request would be swapped out again.
  void swap_in_ahead(const PolicyInput& in, std::vector<PausedDecision>& out) {
    if (in.swap_budget_tokens <= 0) return;
    prefetch_due(
        in, in.spare_device_blocks,
        [](const PausedView& p) { return p.disk_tokens > 0 ? int64_t{0} : p.host_tokens; },
        [this](int64_t tokens) { return 2.0 * cost_.t_swap(tokens); }, out);
  }

  // Reads back the KV on disk of requests whose tool is due (disk_window), soonest first, into
  // `free_host` host blocks at most.
  void prefetch(const PolicyInput& in, int64_t free_host, std::vector<PausedDecision>& out) {
    prefetch_due(
        in, free_host, [](const PausedView& p) { return p.on_disk ? p.disk_tokens : int64_t{0}; },
        [this](int64_t tokens) { return disk_window(tokens); }, out);
  }

  // Marks for a prefetch the preserved paused requests with `tokens_of` tokens to bring up a
  // tier whose tool is expected back within `window(tokens)`, soonest first, while their
  // blocks fit in `room`.
  template <typename TokensOf, typename Window>
  void prefetch_due(const PolicyInput& in, int64_t room, TokensOf tokens_of, Window window,
                    std::vector<PausedDecision>& out) {
    if (room <= 0) return;
    prefetches_.clear();
    for (size_t i = 0; i < in.paused.size(); ++i) {
      const PausedView& p = in.paused[i];
      const int64_t tokens = tokens_of(p);
      if (tokens <= 0 || out[i].action != KvAction::preserve) continue;
      const double t_int = estimator_.expected_remaining(p.tool, p.elapsed, p.hint);
      if (t_int <= window(tokens)) prefetches_.push_back({i, t_int});
    }
    std::stable_sort(prefetches_.begin(), prefetches_.end(),
                     [](const Ranked& a, const Ranked& b) { return a.key < b.key; });
    for (const Ranked& pf : prefetches_) {
      const PausedView& p = in.paused[pf.index];
      const int64_t blocks = blocks_for(tokens_of(p), in.block_size);
      if (blocks > room) continue;
      out[pf.index].id = p.id;
      out[pf.index].action = KvAction::prefetch;
      room -= blocks;
    }
  }
  std::vector<Ranked> prefetches_;  // by expected remaining seconds
  std::vector<Ranked> spills_;      // by W_sp

  const CostModel& cost_;
  const DurationEstimator& estimator_;
  PolicyOptions options_;
  std::vector<Cand> cands_;  // scratch reused across steps: no allocation once warmed up
};

}  // namespace

std::unique_ptr<Policy> make_policy(PolicyKind kind, const CostModel& cost,
                                    const DurationEstimator& estimator,
                                    const PolicyOptions& options) {
  switch (kind) {
    case PolicyKind::discard:
    case PolicyKind::improved_discard:
      return std::make_unique<FixedPolicy>(kind, KvAction::discard);
    case PolicyKind::preserve:
      return std::make_unique<FixedPolicy>(kind, KvAction::preserve);
    case PolicyKind::swap:
      return std::make_unique<SwapPolicy>();
    case PolicyKind::ttl:
      return std::make_unique<TtlPolicy>(estimator, options);
    case PolicyKind::minwaste:
      return std::make_unique<MinWastePolicy>(cost, estimator, options);
  }
  CHECK_MSG(false, "unknown PolicyKind");
  return nullptr;
}

}  // namespace infercept
