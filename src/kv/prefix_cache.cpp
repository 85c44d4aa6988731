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

uint64_t namespace_id(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then mixed
  for (char c : name) h = (h ^ (uint8_t)c) * 0x100000001b3ull;
  return mix(h);
}

PrefixCache::PrefixCache(BlockAllocator& allocator, int64_t block_size, bool lower_tier)
    : allocator_(allocator),
      block_size_(block_size),
      lower_tier_(lower_tier),
      key_by_block_((size_t)allocator.n_blocks(), 0) {
  CHECK_GT(block_size, 0);
}

PrefixCache::~PrefixCache() {
  for (const auto& [key, e] : entries_) {
    allocator_.set_cached(e.block, false);
    allocator_.release(e.block);
  }
}

uint64_t PrefixCache::key_of(uint64_t parent, uint64_t ns, std::span<const int32_t> tokens) const {
  uint64_t h = mix(parent ^ mix(ns));
  for (int32_t t : tokens) h = mix(h ^ (uint64_t)(uint32_t)t);
  return h == kRoot ? 1 : h;  // 0 stands for "no parent"
}

const PrefixCache::Entry* PrefixCache::find(uint64_t parent, uint64_t ns,
                                            std::span<const int32_t> tokens) const {
  auto it = entries_.find(key_of(parent, ns, tokens));
  if (it == entries_.end()) return nullptr;
  const Entry& e = it->second;
  if (e.parent != parent || e.ns != ns ||
      !std::equal(tokens.begin(), tokens.end(), e.tokens.begin(), e.tokens.end()))
    return nullptr;
  return &e;
}

PrefixCache::Hit PrefixCache::match(uint64_t ns, std::span<const int32_t> tokens,
                                    int64_t max_blocks, uint64_t parent) {
  Hit hit;
  const auto B = (size_t)block_size_;
  for (size_t pos = 0; pos + B <= tokens.size() && (int64_t)hit.blocks.size() < max_blocks;
       pos += B) {
    const Entry* e = find(parent, ns, tokens.subspan(pos, B));
    if (e == nullptr) break;
    allocator_.retain(e->block);
    hit.blocks.push_back(e->block);
    hit.keys.push_back(e->key);
    parent = e->key;
  }
  return hit;
}

int64_t PrefixCache::peek(uint64_t ns, std::span<const int32_t> tokens, int64_t max_blocks) const {
  int64_t n = 0;
  uint64_t parent = kRoot;
  const auto B = (size_t)block_size_;
  for (size_t pos = 0; pos + B <= tokens.size() && n < max_blocks; pos += B, ++n) {
    const Entry* e = find(parent, ns, tokens.subspan(pos, B));
    if (e == nullptr) break;
    parent = e->key;
  }
  return n;
}

int64_t PrefixCache::peek(uint64_t ns, std::span<const int32_t> tokens, int64_t max_blocks,
                          PeekMemo& memo) const {
  const auto B = (size_t)block_size_;
  const bool valid =
      memo.erasures == erasures_ && memo.ns == ns && (size_t)memo.blocks * B <= tokens.size();
  if (!valid) memo = PeekMemo{ns, erasures_, 0, kRoot};
  if (memo.blocks >= max_blocks) return max_blocks;
  for (size_t pos = (size_t)memo.blocks * B; pos + B <= tokens.size() && memo.blocks < max_blocks;
       pos += B) {
    const Entry* e = find(memo.key, ns, tokens.subspan(pos, B));
    if (e == nullptr) break;
    memo.key = e->key;
    ++memo.blocks;
  }
  return memo.blocks;
}

std::optional<uint64_t> PrefixCache::index_block(uint64_t ns, uint64_t parent,
                                                 std::span<const int32_t> tokens, int32_t& block) {
  CHECK_EQ((int64_t)tokens.size(), block_size_);
  if (const Entry* e = find(parent, ns, tokens)) {
    if (e->block != block) {  // a copy of an indexed block: the caller takes the indexed one
      allocator_.retain(e->block);
      allocator_.release(block);
      block = e->block;
    }
    return e->key;
  }
  const uint64_t key = key_of(parent, ns, tokens);
  if (entries_.count(key) != 0) return std::nullopt;  // the key belongs to another prefix
  CHECK_MSG(key_by_block_[(size_t)block] == 0, "a block is indexed for two prefixes");
  Entry e;
  e.key = key;
  e.parent = parent;
  e.ns = ns;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.block = block;
  allocator_.retain(block);
  allocator_.set_cached(block, true);
  key_by_block_[(size_t)block] = key;
  if (parent != kRoot && !lower_tier_) entries_.at(parent).children++;
  entries_.emplace(key, std::move(e));
  return key;
}

std::vector<uint64_t> PrefixCache::insert(uint64_t ns, std::span<const int32_t> tokens,
                                          std::vector<int32_t>& blocks) {
  std::vector<uint64_t> keys;
  const auto B = (size_t)block_size_;
  const size_t full = std::min(blocks.size(), tokens.size() / B);
  uint64_t parent = kRoot;
  for (size_t i = 0; i < full; ++i) {
    const auto key = index_block(ns, parent, tokens.subspan(i * B, B), blocks[i]);
    if (!key) break;
    keys.push_back(*key);
    parent = *key;
  }
  return keys;
}

void PrefixCache::erase(const Entry& e) {
  if (e.parent != kRoot && !lower_tier_) entries_.at(e.parent).children--;
  key_by_block_[(size_t)e.block] = 0;
  const uint64_t key = e.key;  // e is the entry being erased
  allocator_.set_cached(e.block, false);
  allocator_.release(e.block);
  entries_.erase(key);
  ++erasures_;
}

std::vector<int32_t> PrefixCache::evict(int64_t n,
                                        const std::function<void(const Evicted&)>& on_evict) {
  std::vector<int32_t> freed;
  // The idle list's head has been idle longest and is a leaf (see the header); a block that
  // still has children (only where a holder broke the back-to-front rule) waits its turn.
  int32_t b = allocator_.oldest_idle_cached();
  while ((int64_t)freed.size() < n && b >= 0) {
    const Entry& e = entries_.at(key_by_block_[(size_t)b]);
    if (e.children > 0) {
      b = -1;
      // Skip to the first idle leaf after it (rare: a slow walk is fine).
      for (int32_t c = allocator_.oldest_idle_cached(); c >= 0;) {
        const Entry& ce = entries_.at(key_by_block_[(size_t)c]);
        if (ce.children == 0) {
          b = c;
          break;
        }
        c = allocator_.next_idle_cached(c);
      }
      if (b < 0) break;
      continue;
    }
    freed.push_back(b);
    if (on_evict) on_evict({e.ns, e.parent, e.key, e.tokens, e.block});
    erase(e);
    b = allocator_.oldest_idle_cached();
  }
  return freed;
}

void PrefixCache::check_invariants() const {
  std::unordered_map<uint64_t, int64_t> children;
  for (const auto& [key, e] : entries_) {
    CHECK_EQ(key, e.key);
    CHECK_EQ((int64_t)e.tokens.size(), block_size_);
    CHECK_GE(allocator_.refcount(e.block), 1);
    CHECK(allocator_.is_cached(e.block));
    CHECK_MSG(key_by_block_[(size_t)e.block] == key, "a block stands for two entries");
    if (e.parent != kRoot && !lower_tier_) {
      CHECK(entries_.count(e.parent) == 1);
      CHECK_EQ(entries_.at(e.parent).ns, e.ns);
      children[e.parent]++;
    }
  }
  int64_t indexed = 0;
  for (uint64_t k : key_by_block_) indexed += k != 0 ? 1 : 0;
  CHECK_EQ(indexed, (int64_t)entries_.size());
  for (const auto& [key, e] : entries_) CHECK_EQ(e.children, children[key]);
}

}  // namespace infercept
