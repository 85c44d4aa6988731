#include "kv/block_allocator.h"

#include <numeric>

#include "core/check.h"

namespace infercept {

BlockAllocator::BlockAllocator(int32_t n_blocks)
    : refcount_((size_t)n_blocks, 0),
      cached_((size_t)n_blocks, 0),
      idle_prev_((size_t)n_blocks, -1),
      idle_next_((size_t)n_blocks, -1) {
  CHECK_GE(n_blocks, 0);
  free_.resize((size_t)n_blocks);
  // Hand out low ids first: the stack pops from the back.
  for (int32_t i = 0; i < n_blocks; ++i) free_[(size_t)i] = n_blocks - 1 - i;
}

std::optional<int32_t> BlockAllocator::allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t b = free_.back();
  free_.pop_back();
  CHECK_EQ(refcount_[(size_t)b], 0);
  refcount_[(size_t)b] = 1;
  return b;
}

void BlockAllocator::retain(int32_t block) {
  CHECK(block >= 0 && block < n_blocks());
  CHECK_GT(refcount_[(size_t)block], 0);
  if (++refcount_[(size_t)block] == 2 && cached_[(size_t)block]) unlink_idle(block);
}

void BlockAllocator::release(int32_t block) {
  CHECK(block >= 0 && block < n_blocks());
  CHECK_GT(refcount_[(size_t)block], 0);
  const int32_t left = --refcount_[(size_t)block];
  if (left == 1 && cached_[(size_t)block]) link_idle(block);
  if (left == 0) {
    CHECK_MSG(!cached_[(size_t)block], "a cached block lost its last owner (the cache)");
    free_.push_back(block);
  }
}

void BlockAllocator::set_cached(int32_t block, bool cached) {
  CHECK(block >= 0 && block < n_blocks());
  CHECK_GT(refcount_[(size_t)block], 0);
  if ((cached_[(size_t)block] != 0) == cached) return;
  cached_[(size_t)block] = cached ? 1 : 0;
  if (refcount_[(size_t)block] == 1) {
    if (cached)
      link_idle(block);
    else
      unlink_idle(block);
  }
}

void BlockAllocator::link_idle(int32_t b) {
  idle_prev_[(size_t)b] = idle_tail_;
  idle_next_[(size_t)b] = -1;
  if (idle_tail_ >= 0)
    idle_next_[(size_t)idle_tail_] = b;
  else
    idle_head_ = b;
  idle_tail_ = b;
  ++n_idle_;
}

void BlockAllocator::unlink_idle(int32_t b) {
  const int32_t p = idle_prev_[(size_t)b], n = idle_next_[(size_t)b];
  if (p >= 0)
    idle_next_[(size_t)p] = n;
  else
    idle_head_ = n;
  if (n >= 0)
    idle_prev_[(size_t)n] = p;
  else
    idle_tail_ = p;
  idle_prev_[(size_t)b] = idle_next_[(size_t)b] = -1;
  --n_idle_;
}

int32_t BlockAllocator::refcount(int32_t block) const {
  CHECK(block >= 0 && block < n_blocks());
  return refcount_[(size_t)block];
}

void BlockAllocator::check_invariants() const {
  std::vector<char> seen(refcount_.size(), 0);
  for (int32_t b : free_) {
    CHECK(b >= 0 && b < n_blocks());
    CHECK_MSG(!seen[(size_t)b], "block is on the free list twice");
    seen[(size_t)b] = 1;
    CHECK_MSG(refcount_[(size_t)b] == 0, "free block has owners");
  }
  int32_t used = 0;
  for (size_t b = 0; b < refcount_.size(); ++b) {
    CHECK(refcount_[b] >= 0);
    if (refcount_[b] > 0) {
      CHECK(!seen[b]);
      ++used;
    } else {
      CHECK_MSG(seen[b], "block with no owner is not on the free list (leak)");
    }
  }
  CHECK_EQ(used + n_free(), n_blocks());
  int32_t idle = 0;
  for (size_t b = 0; b < refcount_.size(); ++b) idle += cached_[b] && refcount_[b] == 1 ? 1 : 0;
  CHECK_EQ(idle, n_idle_);
  int32_t walked = 0;
  for (int32_t b = idle_head_, prev = -1; b >= 0; prev = b, b = idle_next_[(size_t)b]) {
    CHECK_MSG(cached_[(size_t)b] && refcount_[(size_t)b] == 1, "a block on the idle list is held");
    CHECK_EQ(idle_prev_[(size_t)b], prev);
    CHECK_LE(++walked, n_idle_);
  }
  CHECK_EQ(walked, n_idle_);
  CHECK_EQ(n_free() + n_idle_ + n_held(), n_blocks());
}

int32_t BlockTable::slot(int64_t pos, int64_t block_size) const {
  const size_t bi = (size_t)(pos / block_size);
  CHECK_LT(bi, blocks.size());
  return blocks[bi] * (int32_t)block_size + (int32_t)(pos % block_size);
}

}  // namespace infercept
