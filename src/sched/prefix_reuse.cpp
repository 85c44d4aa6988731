// The scheduler's side of the prefix cache (kv/prefix_cache.h holds the index): a request
// admitted with nothing computed starts from the longest cached prefix of its tokens; every
// full block a step computes is indexed as it completes; blocks nobody holds stay cached
// and are evicted, least recently used first, when a step needs room. A sequence never
// writes into a block someone else holds: a match stops a whole block short of the last
// token, and a paused context cut inside a shared block gives that block up
// (truncate_paused).
//
// Two tiers. A device block evicted while the step's swap budget allows and the host pool
// has room (free, or idle cached blocks of its own to evict) is demoted: copied to a host
// block indexed under the same key, so the chain goes on in the host tier. A match that
// ends in the device tier goes on in the host tier, and what it finds there is promoted:
// copied back to device blocks (again under the swap budget) and indexed there. The host
// pool is one pool for both uses: paused requests' swapped KV takes idle cached host blocks
// when no block is free. The copies ride in the plan's swap lists, so they are batched and
// overlapped with the forward pass like any swap; swap-ins run before swap-outs, so a
// device block any swap-out of a step reads (a demotion, paused KV moved out, a swap
// preemption) is never a promotion's destination in the same step, a host block
// demoted in a step is not promoted in it, and a host block a promotion reads stays
// referenced until the next step.
#include <algorithm>

#include "core/check.h"
#include "sched/scheduler.h"

namespace infercept {

int64_t Scheduler::cached_device_blocks() const {
  return cache_ != nullptr ? cache_->n_entries() : 0;
}

int64_t Scheduler::cached_host_blocks() const {
  return host_cache_ != nullptr ? host_cache_->n_entries() : 0;
}

int64_t Scheduler::available_host_blocks() const {
  if (host_ == nullptr) return 0;
  return (int64_t)host_->n_free() + (int64_t)host_->n_idle_cached();
}

std::optional<int32_t> Scheduler::take_host_block() {
  if (host_ == nullptr) return std::nullopt;
  if (host_->n_free() == 0 && host_cache_ != nullptr) host_cache_->evict(1);
  return host_->allocate();
}

std::optional<int32_t> Scheduler::take_copy_destination() {
  std::vector<int32_t> set_aside;  // free, but read by a swap-out of this step
  std::optional<int32_t> b;
  for (;;) {
    if (device_.n_free() == 0 && evict_cached(1) == 0) break;  // dropped, not demoted
    b = device_.allocate();
    if (!b || std::find(read_out_this_step_.begin(), read_out_this_step_.end(), *b) ==
                  read_out_this_step_.end())
      break;
    set_aside.push_back(*b);
    b.reset();
  }
  for (int32_t x : set_aside) device_.release(x);
  return b;
}

bool Scheduler::shared_block(int32_t block) const {
  return device_.refcount(block) > 1;
}

int64_t Scheduler::available_device_blocks() const {
  return (int64_t)device_.n_free() + (int64_t)device_.n_idle_cached();
}

// A block the cache indexes and only this sequence holds besides it is the pause's own: were
// it released it could be evicted, so holding it denies memory to others. A block another
// sequence holds costs nothing extra.
int64_t Scheduler::exclusive_device_tokens(const Sequence& s) const {
  const int64_t bs = config_.block_size;
  const int64_t on_device = s.device_tokens(bs);
  return on_device - std::min(on_device, shared_device_blocks(s) * bs);
}

// Whether another sequence holds device block i of s (besides s and the cache's index).
bool Scheduler::held_by_others(const Sequence& s, size_t i) const {
  const int32_t b = s.blocks.blocks[i];
  return device_.refcount(b) - 1 - (device_.is_cached(b) ? 1 : 0) > 0;
}

// The blocks of s that other sequences hold are a prefix of its blocks: whoever holds a block
// holds its ancestors (a match hands out a whole chain, a copy of an indexed block is traded
// for the indexed one, and blocks are let go from the back), so the first block nobody else
// holds is found by bisection, not a scan: every paused context is weighed every step, and 64
// paused 64k-token contexts took 0.50 ms a step scanned (bench_prefix_cache). check_invariants
// holds every sequence to the property.
int64_t Scheduler::shared_device_blocks(const Sequence& s) const {
  size_t lo = 0, hi = s.blocks.blocks.size();  // blocks [0, lo) shared, [hi, end) not
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (held_by_others(s, mid))
      lo = mid + 1;
    else
      hi = mid;
  }
  return (int64_t)lo;
}

void Scheduler::attach_cached_prefix(Sequence& s, StepPlan& plan) {
  if (cache_ == nullptr || s.n_computed != 0 || !s.blocks.blocks.empty() || !s.host_blocks.empty())
    return;
  const int64_t bs = config_.block_size;
  // At least the last token runs: its row gives the next token.
  const int64_t most = ((int64_t)s.tokens.size() - 1) / bs;
  if (most <= 0) return;
  PrefixCache::Hit hit = cache_->match(s.cache_ns, s.tokens, most);
  s.blocks.blocks = std::move(hit.blocks);
  s.cache_keys = std::move(hit.keys);
  s.cache_stopped = false;
  promote_cached(s, plan, most);
  if (s.blocks.blocks.empty()) return;
  s.n_computed = (int64_t)s.blocks.blocks.size() * bs;
  s.n_computed_peak = std::max(s.n_computed_peak, s.n_computed);
  s.blocks.n_tokens = s.n_computed;
}

int64_t Scheduler::cached_prefix_tokens(const Sequence& s) const {
  if (cache_ == nullptr || s.n_computed != 0 || !s.blocks.blocks.empty()) return 0;
  const int64_t bs = config_.block_size;
  const int64_t most = ((int64_t)s.tokens.size() - 1) / bs;
  return most > 0 ? cache_->peek(s.cache_ns, s.tokens, most, s.peek_memo) * bs : 0;
}

void Scheduler::detach_cached_prefix(Sequence& s) {
  if (s.blocks.blocks.empty()) return;
  release_device_blocks(s);
  s.n_computed = 0;
  s.blocks.n_tokens = 0;
}

void Scheduler::count_admission(Sequence& s) {
  if (cache_ == nullptr) return;
  prefix_counters_.query_tokens += (int64_t)s.tokens.size();
  prefix_counters_.hit_tokens += s.n_computed;
  s.n_cache_hit = s.n_computed;
}

void Scheduler::index_computed_blocks(Sequence& s) {
  if (cache_ == nullptr || s.cache_stopped) return;
  const int64_t bs = config_.block_size;
  const auto full = (size_t)std::min<int64_t>(s.n_computed / bs, (int64_t)s.blocks.blocks.size());
  const std::span<const int32_t> tokens(s.tokens);
  for (size_t i = s.cache_keys.size(); i < full; ++i) {
    const uint64_t parent = i > 0 ? s.cache_keys[i - 1] : 0;
    const auto key = cache_->index_block(
        s.cache_ns, parent, tokens.subspan(i * (size_t)bs, (size_t)bs), s.blocks.blocks[i]);
    if (!key) {
      s.cache_stopped = true;
      return;
    }
    s.cache_keys.push_back(*key);
  }
}

void Scheduler::promote_cached(Sequence& s, StepPlan& plan, int64_t most_blocks) {
  if (host_cache_ == nullptr) return;
  const int64_t bs = config_.block_size;
  const auto have = (int64_t)s.blocks.blocks.size();
  if (have >= most_blocks) return;
  const std::span<const int32_t> rest =
      std::span<const int32_t>(s.tokens).subspan((size_t)(have * bs));
  PrefixCache::Hit hit =
      host_cache_->match(s.cache_ns, rest, most_blocks - have, have > 0 ? s.cache_keys.back() : 0);
  size_t i = 0;
  for (; i < hit.blocks.size(); ++i) {
    if (swap_budget_left_ < bs) break;
    // A block demoted in this step is written after the copies in run: not yet readable.
    if (std::find(demoted_to_this_step_.begin(), demoted_to_this_step_.end(), hit.blocks[i]) !=
        demoted_to_this_step_.end())
      break;
    const auto db = take_copy_destination();
    if (!db) break;
    const int32_t hb = hit.blocks[i];
    int32_t block = *db;
    const auto pos = (size_t)((have + (int64_t)i) * bs);
    const uint64_t parent = s.cache_keys.empty() ? 0 : s.cache_keys.back();
    const auto key = cache_->index_block(
        s.cache_ns, parent, std::span<const int32_t>(s.tokens).subspan(pos, (size_t)bs), block);
    if (!key) {  // the key is another prefix's on the device (a hash collision): stop here
      device_.release(*db);
      break;
    }
    if (block == *db) {  // (else the device tier had it after all: no copy needed)
      plan.swap_in.push_back({hb, *db});
      swap_budget_left_ -= bs;
      prefix_counters_.promoted_blocks++;
    }
    pinned_host_.push_back(hb);  // read by this step's copies: not reused before the next
    s.blocks.blocks.push_back(block);
    s.cache_keys.push_back(*key);
  }
  for (; i < hit.blocks.size(); ++i) host_->release(hit.blocks[i]);
}

int64_t Scheduler::evict_cached(int64_t n, StepPlan* plan) {
  if (cache_ == nullptr || n <= 0) return 0;
  const int64_t bs = config_.block_size;
  auto demote = [&](const PrefixCache::Evicted& e) {
    if (plan == nullptr || host_cache_ == nullptr) return;
    if (host_cache_->contains(e.ns, e.parent, e.tokens)) return;  // the host has a copy
    if (swap_budget_left_ < bs || available_host_blocks() == 0) return;
    const auto hb = take_host_block();
    if (!hb) return;
    plan->swap_out.push_back({e.block, *hb});
    read_out_this_step_.push_back(e.block);
    demoted_to_this_step_.push_back(*hb);
    int32_t block = *hb;
    const auto key = host_cache_->index_block(e.ns, e.parent, e.tokens, block);
    host_->release(*hb);  // the host tier's reference is the cache's
    if (!key) return;     // (a key collision there: the copy is dropped with the block)
    swap_budget_left_ -= bs;
    prefix_counters_.demoted_blocks++;
  };
  const auto freed = (int64_t)cache_->evict(n, demote).size();
  prefix_counters_.evicted_blocks += freed;
  return freed;
}

}  // namespace infercept
