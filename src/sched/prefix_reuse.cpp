// The scheduler's side of the prefix cache (kv/prefix_cache.h holds the index): a request
// admitted with nothing computed starts from the longest cached prefix of its tokens; every
// full block a step computes is indexed as it completes; blocks nobody holds stay cached
// and are evicted, least recently used first, when a step needs room. A sequence never
// writes into a block someone else holds: a match stops a whole block short of the last
// token, and a paused context cut inside a shared block gives that block up
// (truncate_paused).
#include <algorithm>

#include "core/check.h"
#include "sched/scheduler.h"

namespace infercept {

int64_t Scheduler::cached_device_blocks() const {
  return cache_ != nullptr ? cache_->n_entries() : 0;
}

int64_t Scheduler::cached_host_blocks() const {
  return 0;
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
  int64_t n = on_device;
  for (size_t i = 0; i < s.blocks.blocks.size(); ++i) {
    const int32_t b = s.blocks.blocks[i];
    const int32_t others = device_.refcount(b) - 1 - (device_.is_cached(b) ? 1 : 0);
    if (others > 0) n -= std::clamp<int64_t>(on_device - (int64_t)i * bs, 0, bs);
  }
  return n;
}

void Scheduler::attach_cached_prefix(Sequence& s) {
  if (cache_ == nullptr || s.n_computed != 0 || !s.blocks.blocks.empty() || !s.host_blocks.empty())
    return;
  const int64_t bs = config_.block_size;
  // At least the last token runs: its row gives the next token.
  const int64_t most = ((int64_t)s.tokens.size() - 1) / bs;
  if (most <= 0) return;
  PrefixCache::Hit hit = cache_->match(s.cache_ns, s.tokens, most);
  if (hit.blocks.empty()) return;
  s.blocks.blocks = std::move(hit.blocks);
  s.cache_keys = std::move(hit.keys);
  s.cache_stopped = false;
  s.n_computed = (int64_t)s.blocks.blocks.size() * bs;
  s.n_computed_peak = std::max(s.n_computed_peak, s.n_computed);
  s.blocks.n_tokens = s.n_computed;
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

int64_t Scheduler::evict_cached(int64_t n) {
  if (cache_ == nullptr || n <= 0) return 0;
  const auto freed = (int64_t)cache_->evict(n).size();
  prefix_counters_.evicted_blocks += freed;
  return freed;
}

}  // namespace infercept
