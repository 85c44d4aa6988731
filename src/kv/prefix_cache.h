// An index of full KV blocks by the token content of the whole prefix they end, so that a new
// request takes the longest cached prefix and computes only the rest. Bookkeeping only, like
// BlockAllocator: it maps prefixes to block ids and holds one reference on each block it
// indexes (BlockAllocator::retain); the bytes stay in the backend's KvStorage.
//
// Keys form a hash chain: a block's key hashes its parent's key, the namespace (requests of
// different API keys never share) and its own tokens. A hash is only a hint: an entry keeps
// its tokens, namespace and parent key, and a match checks all three, so a collision can never
// hand out another prefix's KV (a block whose key is taken by another prefix is not indexed;
// with 64-bit keys that is a matter of chance, not of load). Why a chain of full blocks rather than
// a radix tree over tokens: the unit of sharing is a KV block anyway (a partial block is never
// shared: the next token would write into it), and a hash map over block keys gives O(blocks)
// lookups with no tree to rebalance; a radix tree's finer token granularity buys nothing a block
// can hold.
//
// A block whose only owner is the cache (refcount 1) is idle and evictable, in the order the
// blocks went idle (BlockAllocator's idle list): least recently used first, and a block before
// its parent, because whoever holds a cached block holds its cached ancestors too (a match
// hands out the whole chain; an insert replaces a copy of an indexed block by the indexed one)
// and releases its blocks from the back.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kv/block_allocator.h"

namespace infercept {

// The namespace id of a name (an API key and cache key, as the server composes it).
uint64_t namespace_id(std::string_view name);

class PrefixCache {
 public:
  // `lower_tier`: the host tier of a two-tier cache, whose entries' parents may be indexed
  // in the device tier instead (blocks are evicted leaves first from the device and demoted
  // here, so a demoted chain hangs from a device block or from another demoted one). Its
  // entries are evicted in plain least-recently-used order: a child left without its
  // parent in either tier cannot be matched and goes in its turn.
  PrefixCache(BlockAllocator& allocator, int64_t block_size, bool lower_tier = false);
  ~PrefixCache();  // releases the cache's references

  struct Hit {
    std::vector<int32_t> blocks;  // retained once each for the caller
    std::vector<uint64_t> keys;   // their chain keys (the parents of the next blocks)
  };
  // The longest cached prefix of `tokens` in namespace `ns`, whole blocks only, at most
  // `max_blocks` of them. `parent`: the key of the block before tokens[0] (0: tokens start
  // the context), for a match that goes on from another tier's.
  Hit match(uint64_t ns, std::span<const int32_t> tokens, int64_t max_blocks = INT64_MAX,
            uint64_t parent = 0);
  // Whether this exact block of a prefix is indexed.
  bool contains(uint64_t ns, uint64_t parent, std::span<const int32_t> tokens) const {
    return find(parent, ns, tokens) != nullptr;
  }
  // How many whole blocks match() would find, touching nothing.
  int64_t peek(uint64_t ns, std::span<const int32_t> tokens, int64_t max_blocks = INT64_MAX) const;
  // What a peek found of one context: how many blocks and the last one's key. The context's
  // tokens may grow between peeks but its first `blocks` blocks must stay as they were.
  struct PeekMemo {
    uint64_t ns = 0;
    uint64_t erasures = ~uint64_t{0};  // erasures() when taken (all ones: never taken)
    int64_t blocks = 0;
    uint64_t key = 0;
  };
  // peek(), going on from `memo` when the index has lost no entry since it was taken: entries
  // were only added then, so every block found before is still there and only those after
  // them are looked up. The request at the head of the queue is peeked every step it waits
  // (Scheduler::memory_deficit_blocks, the prefill candidates): over a cached 128k-token
  // prompt a peek from the start takes 0.70 ms (bench/bench_prefix_cache.cpp).
  int64_t peek(uint64_t ns, std::span<const int32_t> tokens, int64_t max_blocks,
               PeekMemo& memo) const;
  // Entries removed so far (evicted, or dropped with the cache).
  uint64_t erasures() const { return erasures_; }
  // Indexes one full block of a sequence: `tokens` are its B tokens, `parent` the key of the
  // block before it (0 for a first block). When the prefix is indexed already by another
  // block, the caller's `block` is released and replaced by the indexed one (retained for
  // it): the copies hold the same KV, and one copy is what keeps eviction leaves-first.
  // Returns the block's key, or nullopt when the key belongs to another prefix (a hash
  // collision: the block and whatever follows it stay out of the cache).
  std::optional<uint64_t> index_block(uint64_t ns, uint64_t parent, std::span<const int32_t> tokens,
                                      int32_t& block);
  // index_block for every full block of a sequence: `blocks[i]` holds tokens [i*B, (i+1)*B).
  // Returns the keys of the blocks indexed (a prefix of them).
  std::vector<uint64_t> insert(uint64_t ns, std::span<const int32_t> tokens,
                               std::vector<int32_t>& blocks);
  // An entry about to be evicted: what it stood for and its block (still allocated).
  struct Evicted {
    uint64_t ns = 0, parent = 0, key = 0;
    std::span<const int32_t> tokens;
    int32_t block = -1;
  };
  // Frees up to `n` idle blocks, least recently used leaves first; `on_evict` (if set) sees
  // each before it goes (the scheduler demotes it to the host tier). Returns the freed block
  // ids, in eviction order.
  std::vector<int32_t> evict(int64_t n, const std::function<void(const Evicted&)>& on_evict = {});

  int64_t n_entries() const { return (int64_t)entries_.size(); }
  // Blocks evict() could free now.
  int64_t n_evictable() const { return allocator_.n_idle_cached(); }
  // The key of the entry `block` stands for (0: none).
  uint64_t key_of_block(int32_t block) const { return key_by_block_[(size_t)block]; }
  // Every entry's parent is indexed, the cache holds a reference on every indexed block and
  // the allocator marks it cached, no block stands for two entries (so none is reachable
  // from two namespaces), the child counts add up. CHECK on violation (tests).
  void check_invariants() const;

 private:
  struct Entry {
    uint64_t key = 0;
    uint64_t parent = 0;  // 0: the first block of a prefix
    uint64_t ns = 0;
    std::vector<int32_t> tokens;  // the block's own tokens
    int32_t block = -1;
    int64_t children = 0;
  };
  static constexpr uint64_t kRoot = 0;
  uint64_t key_of(uint64_t parent, uint64_t ns, std::span<const int32_t> tokens) const;
  // The entry for this block of the prefix, if the index holds exactly it.
  const Entry* find(uint64_t parent, uint64_t ns, std::span<const int32_t> tokens) const;
  void erase(const Entry& e);

  BlockAllocator& allocator_;
  int64_t block_size_;
  bool lower_tier_ = false;
  std::unordered_map<uint64_t, Entry> entries_;
  std::vector<uint64_t> key_by_block_;
  uint64_t erasures_ = 0;
};

}  // namespace infercept
