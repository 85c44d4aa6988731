// KV bookkeeping: which blocks of a pool are free, and how many owners each used block has.
// It knows ids and reference counts only; the bytes live in the backend's KvStorage. Refcounts
// let sequences and the prefix cache share a block without copying.
//
// A block the prefix cache indexes is marked cached. A cached block whose only owner is the
// cache (refcount 1) is idle: nobody runs on it, it can be evicted. Idle blocks are kept in
// the order they became idle (an intrusive list, O(1) per change), which is the cache's
// least-recently-used order: every holder of a cached block holds its cached ancestors and
// releases blocks from the back of its table, so a block goes idle before its parent and the
// list's head is always a leaf.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace infercept {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t n_blocks);

  int32_t n_blocks() const { return (int32_t)refcount_.size(); }
  int32_t n_free() const { return (int32_t)free_.size(); }
  int32_t n_used() const { return n_blocks() - n_free(); }
  bool can_allocate(int32_t n) const { return n <= n_free(); }

  // A free block with refcount 1, or nullopt when none is left (not an error: the caller
  // waits or preempts).
  std::optional<int32_t> allocate();
  // Adds an owner to a used block.
  void retain(int32_t block);
  // Drops an owner; the block is free again when none is left.
  void release(int32_t block);
  int32_t refcount(int32_t block) const;

  // The prefix cache marks the blocks it indexes (it holds a reference on each).
  void set_cached(int32_t block, bool cached);
  bool is_cached(int32_t block) const { return cached_[(size_t)block] != 0; }
  // Cached blocks only the cache holds, and the one that has been idle longest (-1: none).
  int32_t n_idle_cached() const { return n_idle_; }
  int32_t oldest_idle_cached() const { return idle_head_; }
  int32_t next_idle_cached(int32_t block) const { return idle_next_[(size_t)block]; }
  // Used blocks some request holds: used minus the idle cached ones.
  int32_t n_held() const { return n_used() - n_idle_; }

  // free + idle cached + held == total, refcounts of free blocks are 0, no block is free
  // twice, the idle list holds exactly the idle cached blocks. Aborts
  // (CHECK) on violation: called in tests and debug builds after every step.
  void check_invariants() const;

 private:
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;  // stack: the most recently freed block is reused first
  void link_idle(int32_t block);
  void unlink_idle(int32_t block);
  std::vector<uint8_t> cached_;
  std::vector<int32_t> idle_prev_, idle_next_;  // the idle list, oldest first; -1 ends it
  int32_t idle_head_ = -1, idle_tail_ = -1, n_idle_ = 0;
};

// The blocks of one sequence, in position order, and how many tokens they hold.
struct BlockTable {
  std::vector<int32_t> blocks;
  int64_t n_tokens = 0;  // tokens whose KV is written

  // Blocks needed to hold `tokens` tokens.
  static int64_t blocks_for(int64_t tokens, int64_t block_size) {
    return (tokens + block_size - 1) / block_size;
  }
  // Slot (block * block_size + offset) of token position `pos`.
  int32_t slot(int64_t pos, int64_t block_size) const;
};

}  // namespace infercept
