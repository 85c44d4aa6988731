#include "kv/prefix_cache.h"

#include <algorithm>

#include "core/check.h"

namespace infercept {

namespace {
// splitmix64's finalizer: a fast mix with good avalanche for chaining 64-bit words.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

PrefixCache::PrefixCache(BlockAllocator& allocator, int64_t block_size)
    : allocator_(allocator), block_size_(block_size) {
  CHECK_GT(block_size, 0);
}

PrefixCache::~PrefixCache() {
  for (const auto& [key, e] : entries_) allocator_.release(e.block);
}

uint64_t PrefixCache::key_of(uint64_t parent, uint64_t ns, std::span<const int32_t> tokens) const {
  uint64_t h = mix(parent ^ mix(ns));
  for (int32_t t : tokens) h = mix(h ^ (uint64_t)(uint32_t)t);
  return h == kRoot ? 1 : h;  // 0 stands for "no parent"
}

PrefixCache::Entry* PrefixCache::find(uint64_t parent, uint64_t ns,
                                      std::span<const int32_t> tokens) {
  auto it = entries_.find(key_of(parent, ns, tokens));
  if (it == entries_.end()) return nullptr;
  Entry& e = it->second;
  if (e.parent != parent || e.ns != ns ||
      !std::equal(tokens.begin(), tokens.end(), e.tokens.begin(), e.tokens.end()))
    return nullptr;
  return &e;
}

std::vector<int32_t> PrefixCache::match(uint64_t ns, std::span<const int32_t> tokens) {
  std::vector<int32_t> blocks;
  const uint64_t now = ++clock_;
  uint64_t parent = kRoot;
  for (size_t pos = 0; pos + (size_t)block_size_ <= tokens.size(); pos += (size_t)block_size_) {
    Entry* e = find(parent, ns, tokens.subspan(pos, (size_t)block_size_));
    if (e == nullptr) break;
    e->last_use = now;
    allocator_.retain(e->block);
    blocks.push_back(e->block);
    parent = e->key;
  }
  return blocks;
}

void PrefixCache::insert(uint64_t ns, std::span<const int32_t> tokens,
                         std::span<const int32_t> blocks) {
  const uint64_t now = ++clock_;
  uint64_t parent = kRoot;
  const size_t full = std::min(blocks.size(), tokens.size() / (size_t)block_size_);
  for (size_t i = 0; i < full; ++i) {
    const auto own = tokens.subspan(i * (size_t)block_size_, (size_t)block_size_);
    if (Entry* e = find(parent, ns, own)) {  // indexed already (maybe by another block)
      e->last_use = now;
      parent = e->key;
      continue;
    }
    const uint64_t key = key_of(parent, ns, own);
    if (entries_.count(key) != 0) return;  // the key belongs to another prefix: stop here
    Entry e;
    e.key = key;
    e.parent = parent;
    e.ns = ns;
    e.tokens.assign(own.begin(), own.end());
    e.block = blocks[i];
    e.last_use = now;
    allocator_.retain(e.block);
    if (parent != kRoot) entries_.at(parent).children++;
    entries_.emplace(key, std::move(e));
    parent = key;
  }
}

int64_t PrefixCache::n_evictable() const {
  int64_t n = 0;
  for (const auto& [key, e] : entries_) n += allocator_.refcount(e.block) == 1 ? 1 : 0;
  return n;
}

std::vector<int32_t> PrefixCache::evict(int64_t n) {
  std::vector<int32_t> freed;
  std::vector<Entry*> leaves;
  // Passes over the evictable leaves, least recently used first; a parent whose last child
  // went becomes a leaf for the next pass. (Eviction runs under memory pressure only, and a
  // pass is O(entries log entries).)
  while ((int64_t)freed.size() < n) {
    leaves.clear();
    for (auto& [key, e] : entries_)
      if (e.children == 0 && allocator_.refcount(e.block) == 1) leaves.push_back(&e);
    if (leaves.empty()) break;
    std::sort(leaves.begin(), leaves.end(), [](const Entry* x, const Entry* y) {
      return x->last_use != y->last_use ? x->last_use < y->last_use : x->key < y->key;
    });
    for (Entry* victim : leaves) {
      if ((int64_t)freed.size() >= n) break;
      freed.push_back(victim->block);
      allocator_.release(victim->block);
      if (victim->parent != kRoot) entries_.at(victim->parent).children--;
      entries_.erase(victim->key);
    }
  }
  return freed;
}

void PrefixCache::check_invariants() const {
  std::unordered_map<uint64_t, int64_t> children;
  for (const auto& [key, e] : entries_) {
    CHECK_EQ(key, e.key);
    CHECK_EQ((int64_t)e.tokens.size(), block_size_);
    CHECK_GE(allocator_.refcount(e.block), 1);
    if (e.parent != kRoot) {
      CHECK(entries_.count(e.parent) == 1);
      children[e.parent]++;
    }
  }
  for (const auto& [key, e] : entries_) CHECK_EQ(e.children, children[key]);
}

}  // namespace infercept
