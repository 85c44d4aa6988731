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
// A block whose only owner is the cache (refcount 1) is evictable, least recently used first
// and never before its children (an entry's descendants are evicted first, so every indexed
// block's parent is indexed too).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_allocator.h"

namespace infercept {

class PrefixCache {
 public:
  PrefixCache(BlockAllocator& allocator, int64_t block_size);
  ~PrefixCache();  // releases the cache's references

  // The blocks holding the longest cached prefix of `tokens` in namespace `ns`, whole
  // blocks only, each retained once for the caller (who releases them as its own). Marks
  // them used now.
  std::vector<int32_t> match(uint64_t ns, std::span<const int32_t> tokens);
  // Indexes the full blocks of a sequence in `ns`: `blocks[i]` holds tokens [i*B, (i+1)*B).
  // Blocks already indexed for the same prefix are left as they are (the first copy wins;
  // the caller keeps its own). The cache retains each block it indexes.
  void insert(uint64_t ns, std::span<const int32_t> tokens, std::span<const int32_t> blocks);
  // Frees up to `n` blocks only the cache holds, least recently used leaves first. Returns
  // the freed block ids, in eviction order.
  std::vector<int32_t> evict(int64_t n);

  int64_t n_entries() const { return (int64_t)entries_.size(); }
  // Blocks evict() could free now.
  int64_t n_evictable() const;
  // Every entry's parent is indexed, the cache holds a reference on every indexed block, the
  // child counts add up. CHECK on violation (tests).
  void check_invariants() const;

 private:
  struct Entry {
    uint64_t key = 0;
    uint64_t parent = 0;  // 0: the first block of a prefix
    uint64_t ns = 0;
    std::vector<int32_t> tokens;  // the block's own tokens
    int32_t block = -1;
    int64_t children = 0;
    uint64_t last_use = 0;
  };
  static constexpr uint64_t kRoot = 0;
  uint64_t key_of(uint64_t parent, uint64_t ns, std::span<const int32_t> tokens) const;
  // The entry for this block of the prefix, if the index holds exactly it.
  Entry* find(uint64_t parent, uint64_t ns, std::span<const int32_t> tokens);

  BlockAllocator& allocator_;
  int64_t block_size_;
  std::unordered_map<uint64_t, Entry> entries_;
  uint64_t clock_ = 0;
};

}  // namespace infercept
